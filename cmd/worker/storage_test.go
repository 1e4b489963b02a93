package main

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/internal/testutil/workertest"
)

type fakeDriver struct {
	name string
	err  error
}

func (f fakeDriver) StorageDriver(context.Context) (string, error) { return f.name, f.err }

var _ storageDriverer = fakeDriver{}

// storageLine is the start-up log's record of the storage driver.
type storageLine struct {
	Level  string `json:"level"`
	Msg    string `json:"msg"`
	Driver string `json:"storage_driver"`
}

func TestLogStorageDriver(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		fake  fakeDriver
		level string // "" when no line at INFO or above
	}{
		{"fuse-overlayfs warns", fakeDriver{name: "fuse-overlayfs"}, "WARN"},
		{"overlay2 informs", fakeDriver{name: "overlay2"}, "INFO"},
		{"an engine that does not answer costs the line only", fakeDriver{err: errors.New("no answer")}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var buf strings.Builder
			logStorageDriver(t.Context(), slog.New(slog.NewJSONHandler(&buf, nil)), tc.fake)
			if tc.level == "" {
				if buf.Len() != 0 {
					t.Errorf("logged %q", buf.String())
				}
				return
			}
			var l storageLine
			if err := json.Unmarshal([]byte(buf.String()), &l); err != nil {
				t.Fatalf("%v: %q", err, buf.String())
			}
			if l.Level != tc.level || l.Driver != tc.fake.name {
				t.Errorf("logged %+v, want level %s and storage_driver %s", l, tc.level, tc.fake.name)
			}
			if tc.level == "WARN" && !strings.Contains(l.Msg, "overlay2") {
				t.Errorf("the warning %q does not name overlay2", l.Msg)
			}
		})
	}
}

// The worker's start-up log names the real engine's storage driver, as
// a warning exactly when docker info says fuse-overlayfs.
func TestBinaryStorageDriverWarningDocker(t *testing.T) {
	t.Parallel()
	workertest.Sandbox(t, executor.Config{WorkerID: "probe"}) // Docker and the image answer, or skip
	cli, err := client.New(client.FromEnv)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	info, err := cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		t.Fatal(err)
	}
	url, _, _ := natsServer(t)
	id := uniqueID("storage")
	w := dockerWorker(t, url, id, "--pool", "0")
	var got storageLine
	testutil.Eventually(t, 60*time.Second, "the storage driver logged", func() bool {
		for line := range strings.Lines(w.logs.String()) {
			if err := json.Unmarshal([]byte(line), &got); err == nil && got.Driver != "" {
				return true
			}
		}
		return false
	})
	wantLevel := "INFO"
	if info.Info.Driver == "fuse-overlayfs" {
		wantLevel = "WARN"
	}
	if got.Level != wantLevel || got.Driver != info.Info.Driver {
		t.Errorf("logged %+v; docker info says %q, want level %s", got, info.Info.Driver, wantLevel)
	}
	t.Logf("%s: %s", got.Level, got.Msg)
	stopDockerWorker(t, w, id)
}
