package console_test

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/internal/console"
	"github.com/sandfleet/sandfleet/internal/records"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// A job's page asked while the job finishes: the first Get misses, the
// pending lookup misses (the job is not in the stream), the second Get
// finds the result, whose output the page shows (it read a nil result's,
// and panicked: a 500 through the gateway).
func TestJobPageWhileTheJobFinishes(t *testing.T) {
	t.Parallel()
	f := setup(t, options{open: true})
	c, err := console.New(f.client, console.Config{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for _, rt := range c.Routes() {
		mux.Handle(rt.Pattern, rt.Handler)
	}
	stores := natstest.Stores(t, f.js)
	for i := range 300 {
		id := fmt.Sprintf("race-%d", i)
		delay := time.Duration(i%30) * 50 * time.Microsecond
		stored := make(chan error, 1)
		go func() {
			time.Sleep(delay)
			_, _, err := records.StoreResult(t.Context(), stores.Results, &jobs.Result{ID: id, Status: jobs.StatusSucceeded, Stdout: "hi\n"}, 0)
			stored <- err
		}()
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("iteration %d (result stored after %v): GET /jobs/%s panicked: %v", i, delay, id, p)
				}
			}()
			req := httptest.NewRequest("GET", "/jobs/"+id, nil)
			req.Host = "127.0.0.1"
			rec := httptest.NewRecorder()
			mux.ServeHTTP(rec, req)
			if rec.Code != 200 && rec.Code != 404 {
				t.Fatalf("iteration %d: status %d", i, rec.Code)
			}
		}()
		if err := <-stored; err != nil {
			t.Fatal(err)
		}
	}
}
