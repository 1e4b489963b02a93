package egress

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/testutil"
)

// A worker calls its proxy's control API for every sandbox with a network
// and for its health checks, for as long as it runs: the calls must not
// leave a connection open each (an fd and two goroutines in the worker,
// one more in the proxy, for the worker's life).
func TestControlCallsLeaveNoConnection(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	open := map[net.Conn]bool{}
	srv := httptest.NewUnstartedServer(ControlHandler(&Proxy{}, "tok", netip.MustParsePrefix("10.231.0.0/16")))
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		mu.Lock()
		defer mu.Unlock()
		if s == http.StateClosed || s == http.StateHijacked {
			delete(open, c)
		} else {
			open[c] = true
		}
	}
	srv.Start()
	defer srv.Close()
	c := &Control{URL: srv.URL, Token: "tok"}
	for range 20 {
		if _, err := c.Health(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	testutil.Eventually(t, 5*time.Second, "at most one connection open after 20 control calls", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(open) <= 1
	})
}
