package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/sandfleet/sandfleet/internal/gateway"
	"github.com/sandfleet/sandfleet/internal/mcp"
	"github.com/sandfleet/sandfleet/internal/mcp/mcptest"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/fakeexec"
	"github.com/sandfleet/sandfleet/internal/testutil/natstest"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
	"github.com/sandfleet/sandfleet/internal/worker"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

var (
	submitBinOnce sync.Once
	submitBin     string
	submitBinErr  error
)

// submitBinary builds cmd/submit once per test run: an agent starts the
// real binary, so the tests do too.
func submitBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the submit binary; skipped under -short")
	}
	submitBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "sandfleet-submit-bin-")
		if err != nil {
			submitBinErr = err
			return
		}
		submitBin = filepath.Join(dir, "submit")
		cmd := exec.Command("go", "build", "-o", submitBin, ".")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			submitBinErr = err
			submitBin = string(out)
		}
	})
	if submitBinErr != nil {
		t.Fatalf("go build: %v\n%s", submitBinErr, submitBin)
	}
	return submitBin
}

func TestMain(m *testing.M) {
	code := m.Run()
	if submitBin != "" && submitBinErr == nil {
		os.RemoveAll(filepath.Dir(submitBin))
	}
	os.Exit(code)
}

// stdioServer is `submit mcp` started as an agent starts it, its stdout
// kept to check that it is nothing but protocol.
type stdioServer struct {
	cmd    *exec.Cmd
	stdout *testutil.Buffer
	stderr *testutil.Buffer
	done   chan struct{}
}

func startStdio(t *testing.T, args []string, env ...string) (*stdioServer, sdk.Transport) {
	t.Helper()
	cmd := exec.Command(submitBinary(t), append([]string{"mcp"}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	s := &stdioServer{cmd: cmd, stdout: &testutil.Buffer{}, stderr: &testutil.Buffer{}, done: make(chan struct{})}
	cmd.Stderr = s.stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		_ = in.Close()
		select {
		case <-s.done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-s.done
		}
		if t.Failed() {
			t.Logf("stderr of submit mcp:\n%s", s.stderr.String())
		}
	})
	return s, &sdk.IOTransport{Reader: io.NopCloser(io.TeeReader(out, s.stdout)), Writer: in}
}

// onlyProtocol fails the test unless every line on stdout is a JSON-RPC
// message.
func (s *stdioServer) onlyProtocol(t *testing.T) {
	t.Helper()
	sc := bufio.NewScanner(bytes.NewReader([]byte(s.stdout.String())))
	sc.Buffer(nil, 16<<20)
	n := 0
	for sc.Scan() {
		var msg struct {
			JSONRPC string `json:"jsonrpc"`
		}
		if err := json.Unmarshal(sc.Bytes(), &msg); err != nil || msg.JSONRPC != "2.0" {
			t.Errorf("stdout line %d is not protocol: %.200q", n+1, sc.Text())
		}
		n++
	}
	if n == 0 {
		t.Error("nothing on stdout")
	}
}

// submit mcp straight to NATS, under the SDK's client as an agent runs it.
func TestMCPStdioOverNATS(t *testing.T) {
	t.Parallel()
	url := setup(t, false)
	s, tr := startStdio(t, []string{"--nats", url, "--max-output", "4096"})
	cs := mcptest.Connect(t, tr)
	mcptest.Exercise(t, cs, mcptest.Fake, 4096)
	if err := cs.Close(); err != nil {
		t.Logf("close: %v", err)
	}
	testutil.Eventually(t, 10*time.Second, "submit mcp exits when its client leaves", func() bool {
		select {
		case <-s.done:
			return true
		default:
			return false
		}
	})
	if code := s.cmd.ProcessState.ExitCode(); code != 0 {
		t.Errorf("exit code %d", code)
	}
	s.onlyProtocol(t)
	if !strings.Contains(s.stderr.String(), "run_code") {
		t.Errorf("no log of the calls on stderr: %s", s.stderr.String())
	}
}

// submit mcp through a gateway, with the token from the environment; a
// wrong token is said at start, on stderr.
func TestMCPStdioThroughGateway(t *testing.T) {
	t.Parallel()
	srv := natstest.Server(t)
	nc, js := natstest.Connect(t, srv.ClientURL())
	fx := &fakeexec.Executor{}
	workertest.Start(t, js, fx, worker.Config{ID: "w1", Slots: 4})
	client, err := jobs.NewClient(t.Context(), js, jobs.Config{})
	if err != nil {
		t.Fatal(err)
	}
	secret, line, err := gateway.NewToken("agent", nil)
	if err != nil {
		t.Fatal(err)
	}
	tokens, err := gateway.ParseTokens(strings.NewReader(line))
	if err != nil {
		t.Fatal(err)
	}
	gw, err := gateway.New(client, nc, gateway.Config{Tokens: tokens, TempDir: t.TempDir(), NoConsole: true,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(gw.Close)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- gw.Serve(ctx, ln, time.Second) }()
	t.Cleanup(func() { cancel(); <-served })
	gwURL := "http://" + ln.Addr().String()

	_, tr := startStdio(t, []string{"--max-output", "4096"}, envURL+"="+gwURL, envToken+"="+secret)
	cs := mcptest.Connect(t, tr)
	mcptest.Exercise(t, cs, mcptest.Fake, 4096)
	// The job went through the gateway: it carries the token's name.
	res := mcptest.RunCode(t, t.Context(), cs, map[string]any{"language": "python", "code": "print via http"})
	first, _, _ := strings.Cut(mcptest.Text(res), "\n")
	_, id, _ := strings.Cut(first, ", job ")
	if stored, err := client.Get(t.Context(), id); err != nil || stored.Labels[gateway.TokenLabel] != "agent" {
		t.Errorf("job %q: %v, labels %v; want the token agent's", id, err, stored)
	}

	// Its files come through the gateway's artifact route.
	res = mcptest.RunCode(t, t.Context(), cs, map[string]any{"language": "python", "code": "write out/notes.txt via http", "outputs": []string{"out/*"}})
	first, _, _ = strings.Cut(mcptest.Text(res), "\n")
	_, id, _ = strings.Cut(first, ", job ")
	read, err := cs.ReadResource(t.Context(), &sdk.ReadResourceParams{URI: mcp.ArtifactURI(id, "out/notes.txt")})
	if err != nil || len(read.Contents) != 1 || read.Contents[0].Text != "via http\n" {
		t.Errorf("read out/notes.txt: %v %+v; result %q", err, read, mcptest.Text(res))
	}

	// A call the agent gives up on (notifications/cancelled on stdin)
	// cancels its job through the gateway: it does not run on for nobody.
	cctx, cancelCall := context.WithCancel(t.Context())
	called := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(cctx, &sdk.CallToolParams{Name: "run_code", Arguments: map[string]any{"language": "python", "code": "block"}})
		called <- err
	}()
	testutil.Eventually(t, 10*time.Second, "the long call's job runs", func() bool { return fx.Running() == 1 })
	cancelCall()
	if err := <-called; err == nil {
		t.Error("a canceled call returned no error")
	}
	testutil.Eventually(t, 20*time.Second, "the canceled call's job ends", func() bool { return fx.Running() == 0 })

	for _, c := range []struct{ name, token string }{{"no token", ""}, {"a wrong token", "sft_wrong"}} {
		cmd := exec.CommandContext(t.Context(), submitBinary(t), "mcp")
		cmd.Env = append(os.Environ(), envURL+"="+gwURL, envToken+"="+c.token)
		var stdout, stderr bytes.Buffer
		cmd.Stdin, cmd.Stdout, cmd.Stderr = strings.NewReader(""), &stdout, &stderr
		_ = cmd.Run()
		if code := cmd.ProcessState.ExitCode(); code != exitUsage || !strings.Contains(stderr.String(), "401") ||
			!strings.Contains(stderr.String(), envToken) || stdout.Len() != 0 {
			t.Errorf("%s: exit %d, stderr %q, stdout %q", c.name, code, stderr.String(), stdout.String())
		}
	}
}
