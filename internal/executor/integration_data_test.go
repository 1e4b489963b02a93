package executor

// The "python-data" preset on the real data image (sandbox-image/build.sh
// data): its libraries import, its prestarted interpreter has them
// imported already, and matplotlib figures come back as display outputs,
// bounded, through the launcher alone. SANDFLEET_TEST_DATA_IMAGE names the
// image (default DataImage); without it the tests skip, saying how to build
// it, unless SANDFLEET_REQUIRE_DATA=1.

import (
	"bytes"
	"context"
	"encoding/base64"
	"image/png"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
	"github.com/sandfleet/sandfleet/pkg/sessionapi"
)

// dataSetup returns an executor whose "python-data" preset runs on the data
// image, once it is known to be there.
func dataSetup(t *testing.T, mod func(*Config)) *Executor {
	t.Helper()
	img := os.Getenv("SANDFLEET_TEST_DATA_IMAGE")
	if img == "" {
		img = DataImage
	}
	cli := requireDocker(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, img); err != nil {
		msg := "needs the data image " + img + " (make images-all, or SANDBOX_IMAGE=TAG ./sandbox-image/build.sh data and SANDFLEET_TEST_DATA_IMAGE=TAG): " + err.Error()
		if os.Getenv("SANDFLEET_REQUIRE_DATA") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return setup(t, func(c *Config) {
		p := DefaultPresets()["python-data"]
		p.Image = img
		c.Presets = map[string]Preset{"python-data": p}
		if mod != nil {
			mod(c)
		}
	})
}

func dataJob(code string, mod ...func(*jobs.Job)) *jobs.Job {
	return job(code, append([]func(*jobs.Job){func(j *jobs.Job) { j.Image = "python-data" }}, mod...)...)
}

// The libraries import, and a prestarted interpreter has numpy, pandas and
// matplotlib.pyplot imported before the job: a warm sandbox's job then
// finds them imported, where a fresh process (a job that changes the
// environment gets one) pays for them. Both figures are logged.
func TestIntegrationDataImports(t *testing.T) {
	t.Parallel()
	e := dataSetup(t, func(c *Config) { c.Pool = 1 })
	const code = `import sys, time
pre = "pandas" in sys.modules
t0 = time.perf_counter()
import numpy, pandas, matplotlib.pyplot
ms = (time.perf_counter() - t0) * 1000
import matplotlib
df = pandas.DataFrame({"x": [1, 2, 3]})
print(pre, int(df.x.sum()), matplotlib.get_backend(), round(ms))
`
	slow := limits.Limits{Timeout: limits.Duration(2 * time.Minute)}
	for _, tc := range []struct {
		name string
		env  map[string]string
		pre  string
	}{
		// First, since an optional preset's image is pooled from its
		// first job on.
		{"fresh", map[string]string{"SANDFLEET_FRESH": "1"}, "False"},
		{"prestarted", nil, "True"},
	} {
		if tc.env == nil {
			// Long enough for the preload to be done, most likely: if
			// not, the job waits for it, and only the figure suffers.
			waitIdle(t, e, 1, 15*time.Second)
		}
		r := run(t, e, dataJob(code, withLimits(slow), func(j *jobs.Job) { j.Env = tc.env }))
		if r.Status != jobs.StatusSucceeded {
			t.Fatalf("%s: %s (%s), stderr %q", tc.name, r.Status, r.Error, r.Stderr)
		}
		f := strings.Fields(r.Stdout)
		if len(f) != 4 || f[0] != tc.pre || f[1] != "6" || f[2] != "module://sandfleet_display" {
			t.Fatalf("%s: stdout %q: want %s, 6, the display backend and the import time", tc.name, r.Stdout, tc.pre)
		}
		ms, _ := strconv.Atoi(f[3])
		t.Logf("%s: import numpy, pandas, matplotlib.pyplot took %d ms in the job, which took %d ms", tc.name, ms, *r.DurationMS)
	}
}

// Figures come back without naming a file: one shown, then one left open
// at the end, in that order, as PNGs of their own sizes.
func TestIntegrationDataDisplay(t *testing.T) {
	t.Parallel()
	e := dataSetup(t, nil)
	r := run(t, e, dataJob(`import matplotlib.pyplot as plt
fig = plt.figure(figsize=(4, 3), dpi=100)
plt.plot([1, 2, 3], [1, 4, 9])
plt.show()
plt.figure(figsize=(2, 1), dpi=100)
plt.bar(["a", "b"], [1, 2])
print("drawn")
`, withLimits(limits.Limits{Timeout: limits.Duration(2 * time.Minute)})))
	if r.Status != jobs.StatusSucceeded || r.Stdout != "drawn\n" {
		t.Fatalf("%s (%s), stdout %q, stderr %q", r.Status, r.Error, r.Stdout, r.Stderr)
	}
	if len(r.Display) != 2 || r.DisplayDropped != 0 {
		t.Fatalf("%d display outputs, %d dropped: want 2 and none", len(r.Display), r.DisplayDropped)
	}
	for i, want := range [][2]int{{400, 300}, {200, 100}} {
		d := r.Display[i]
		b, err := base64.StdEncoding.DecodeString(d.Data)
		if err != nil {
			t.Fatalf("display %d: %v", i, err)
		}
		cfg, err := png.DecodeConfig(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("display %d: not a PNG: %v", i, err)
		}
		if d.MIME != "image/png" || d.Width != want[0] || d.Height != want[1] || cfg.Width != want[0] || cfg.Height != want[1] {
			t.Fatalf("display %d: %s %dx%d (decodes to %dx%d), want image/png %dx%d",
				i, d.MIME, d.Width, d.Height, cfg.Width, cfg.Height, want[0], want[1])
		}
	}
}

// A program drawing 100 figures gets the first 16 back and the rest
// counted; files of the job's own in the display directory are bounded in
// bytes, shown only when they are what they claim, and a link out of the
// directory (to the launcher's own /proc entries) or a FIFO gives nothing
// and holds nothing up.
func TestIntegrationDataDisplayBounds(t *testing.T) {
	t.Parallel()
	e := dataSetup(t, nil)
	slow := limits.Limits{Timeout: limits.Duration(3 * time.Minute)}
	r := run(t, e, dataJob(`import matplotlib.pyplot as plt
plt.rcParams["figure.max_open_warning"] = 0
for i in range(100):
    plt.figure(figsize=(1, 1), dpi=50)
    plt.plot([0, i])
plt.show()
`, withLimits(slow)))
	if r.Status != jobs.StatusSucceeded {
		t.Fatalf("%s (%s), stderr %q", r.Status, r.Error, r.Stderr)
	}
	if len(r.Display) != 16 || r.DisplayDropped != 84 || r.Display[15].Width != 50 {
		t.Fatalf("%d display outputs, %d dropped: want 16 of 50x50 and 84", len(r.Display), r.DisplayDropped)
	}

	r = run(t, e, dataJob(`import os, struct, zlib
d = "/tmp/.sandfleet-display"
os.makedirs(d)
def png(w, h, pad):
    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr + struct.pack(">I", zlib.crc32(b"IHDR" + ihdr)) + b"\0" * pad
os.symlink("/proc/self/environ", d + "/000000.png")
os.mkfifo(d + "/000001.png")
open(d + "/000002.png", "wb").write(png(7, 5, 1536 << 10))
open(d + "/000003.png", "wb").write(png(8, 6, 1536 << 10))
open(d + "/000004.png", "wb").write(b"GIF89a not a png")
open(d + "/000005.png", "wb").write(png(3, 2, 10))
open(d + "/000006.txt", "wb").write(b"ignored")
`))
	if r.Status != jobs.StatusSucceeded {
		t.Fatalf("%s (%s), stderr %q", r.Status, r.Error, r.Stderr)
	}
	// Kept: 000002 (1.5 MiB) and 000005; dropped: the link, the FIFO,
	// 000003 (over the 2 MiB in all) and 000004 (not a PNG).
	if len(r.Display) != 2 || r.DisplayDropped != 4 {
		t.Fatalf("%d display outputs, %d dropped: want 2 and 4", len(r.Display), r.DisplayDropped)
	}
	if d := r.Display[0]; d.Width != 7 || d.Height != 5 {
		t.Fatalf("display 0 is %dx%d, want the 7x5 file", d.Width, d.Height)
	}
	if d := r.Display[1]; d.Width != 3 || d.Height != 2 {
		t.Fatalf("display 1 is %dx%d, want the 3x2 file", d.Width, d.Height)
	}
	for _, d := range r.Display {
		if b, _ := base64.StdEncoding.DecodeString(d.Data); bytes.Contains(b, []byte("PATH=")) {
			t.Fatal("a display output holds an environment")
		}
	}
}

// A worker without the data image refuses the preset's jobs, naming the
// image and how to build it.
func TestIntegrationDataImageMissing(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *Config) {
		p := DefaultPresets()["python-data"]
		p.Image = "sandfleet/sandbox-data:absent-" + randHex(4)
		c.Presets = map[string]Preset{"python": DefaultPresets()["python"], "python-data": p}
	})
	r := run(t, e, dataJob("import pandas"))
	img := e.cfg.Presets["python-data"].Image
	if r.Status != jobs.StatusRejected || !strings.Contains(r.Error, img) || !strings.Contains(r.Error, "build.sh data") {
		t.Fatalf("%s (%q): want rejected, naming the image and build.sh data", r.Status, r.Error)
	}
}

// A session's cell returns its figures in its reply, as a notebook shows
// them: those still open at the cell's end, which are then closed (the
// next cell shows none of them), bounded per cell as a job is.
func TestIntegrationDataSessionCell(t *testing.T) {
	t.Parallel()
	e := dataSetup(t, nil)
	s := startSession(t, e, SessionSpec{Image: "python-data"})
	cell := func(code string) *answer {
		t.Helper()
		r := okReply(t, do(t, s, ask{Op: sessionapi.OpCode, Code: code, Timeout: ms(120_000)}))
		if r.CodeError != nil {
			t.Fatalf("cell %q raised %s: %s", code, r.CodeError.Name, r.CodeError.Traceback)
		}
		return r
	}
	r := cell("import matplotlib.pyplot as plt\nplt.figure(figsize=(3, 2), dpi=100)\nplt.plot([1, 2], [3, 1])\nplt.rcParams['figure.max_open_warning'] = 0")
	if len(r.Display) != 1 || r.DisplayDropped != 0 {
		t.Fatalf("%d display outputs, %d dropped: want the one figure left open", len(r.Display), r.DisplayDropped)
	}
	cfg, err := png.DecodeConfig(base64.NewDecoder(base64.StdEncoding, strings.NewReader(r.Display[0].Data)))
	if err != nil || r.Display[0].MIME != "image/png" || cfg.Width != 300 || cfg.Height != 200 {
		t.Fatalf("%s, %dx%d (%v): want a 300x200 PNG", r.Display[0].MIME, cfg.Width, cfg.Height, err)
	}
	if r = cell("len(plt.get_fignums())"); len(r.Display) != 0 || r.Text != "0" {
		t.Fatalf("the next cell: %d display outputs, %s open figures: want none and none", len(r.Display), r.Text)
	}
	r = cell("for i in range(100):\n    plt.figure(figsize=(1, 1), dpi=40)\n    plt.plot([0, i])")
	if len(r.Display) != 16 || r.DisplayDropped != 84 {
		t.Fatalf("100 figures: %d display outputs, %d dropped: want 16 and 84", len(r.Display), r.DisplayDropped)
	}
}
