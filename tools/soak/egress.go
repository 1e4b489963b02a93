package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/sandfleet/sandfleet/internal/executor"
)

// egressHost is the name the egress jobs ask for; the worker's proxy
// resolves it to the test server (--egress-hosts), and allows it
// (--egress-allow), so no DNS and no internet is needed.
const (
	egressHost = "soak.test"
	egressPort = "8080"
	egressBody = "soak-egress-ok"
)

// egressServer answers every GET with egressBody.
const egressServer = `
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        b = b"` + egressBody + `"
        self.send_response(200)
        self.send_header("Content-Length", str(len(b)))
        self.end_headers()
        self.wfile.write(b)
    def log_message(self, *a): pass
http.server.ThreadingHTTPServer(("0.0.0.0", ` + egressPort + `), H).serve_forever()
`

// internet is the soak's own "internet": a bridge network the worker's
// egress proxy reaches the world by (--egress-network), and an HTTP
// server on it, in the sandbox image under runc.
type internet struct {
	network, server, ip string
	once                sync.Once
}

func startInternet(ctx context.Context) (*internet, error) {
	name := fmt.Sprintf("sandfleet-soak-inet-%d", os.Getpid())
	in := &internet{network: name, server: name + "-server"}
	if out, err := exec.CommandContext(ctx, "docker", "network", "create", "--label", "sandfleet.soak=1", name).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("docker network create: %v: %s", err, out)
	}
	out, err := exec.CommandContext(ctx, "docker", "run", "-d", "--name", in.server, "--network", name, "--runtime", "runc",
		"--user", "65534:65534", "--label", "sandfleet.soak=1", "--entrypoint", "python3", executor.DefaultImage, "-c", egressServer).CombinedOutput()
	if err != nil {
		in.stop()
		return nil, fmt.Errorf("docker run the test server: %v: %s", err, out)
	}
	for deadline := time.Now().Add(30 * time.Second); in.ip == ""; time.Sleep(200 * time.Millisecond) {
		if time.Now().After(deadline) {
			in.stop()
			return nil, fmt.Errorf("the test server has no address on %s", name)
		}
		out, _ := exec.Command("docker", "inspect", "-f", "{{(index .NetworkSettings.Networks \""+name+"\").IPAddress}}", in.server).Output()
		in.ip = strings.TrimSpace(string(out))
	}
	return in, nil
}

// workerArgs are the worker's egress flags, then more; none without an
// internet.
func (in *internet) workerArgs(more ...string) []string {
	if in == nil {
		return more
	}
	return append([]string{"--egress-network", in.network, "--egress-hosts", egressHost + "=" + in.ip,
		"--egress-allow", egressHost + ":" + egressPort}, more...)
}

// stop removes the server and the network; what could not be removed is
// a problem (the worker's proxy still attached to the network, say).
func (in *internet) stop() []string {
	if in == nil {
		return nil
	}
	var p []string
	in.once.Do(func() {
		if out, err := exec.Command("docker", "rm", "-f", in.server).CombinedOutput(); err != nil {
			p = append(p, fmt.Sprintf("removing the egress test server: %v: %s", err, out))
		}
		if out, err := exec.Command("docker", "network", "rm", in.network).CombinedOutput(); err != nil {
			p = append(p, fmt.Sprintf("removing the egress test network: %v: %s", err, out))
		}
	})
	return p
}
