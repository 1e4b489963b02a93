package executor

// The "python-data" preset on the real data image (sandbox-image/build.sh
// data): its libraries import, its prestarted interpreter has them
// imported already. SANDFLEET_TEST_DATA_IMAGE names the
// image (default DataImage); without it the tests skip, saying how to build
// it, unless SANDFLEET_REQUIRE_DATA=1.

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
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
