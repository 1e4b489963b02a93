package humanevalx_test

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/sandfleet/sandfleet/examples/humanevalx"
	"github.com/sandfleet/sandfleet/internal/executor"
	"github.com/sandfleet/sandfleet/internal/jobrun"
	"github.com/sandfleet/sandfleet/internal/testutil"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

// dataDir is $HUMANEVALX, else ../shared/data/humaneval-x beside the
// checkout, where CI keeps it.
func dataDir(t *testing.T) string {
	if d := os.Getenv("HUMANEVALX"); d != "" {
		return d
	}
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "shared", "data", "humaneval-x")
}

// Every language's file turns into jobs of its preset, canonical and
// broken, with the labels pass@1 groups by. No Docker needed.
func TestJobs(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	for _, lang := range humanevalx.LanguageOrder {
		ps, err := humanevalx.Read(humanevalx.File(dir, lang))
		if err != nil {
			t.Skipf("HumanEval-X not found (%v): set HUMANEVALX=DIR, or put it in ../shared/data/humaneval-x; see docs/evals.md, \"HumanEval-X\"", err)
		}
		if len(ps) != 164 {
			t.Errorf("%s: %d problems", lang, len(ps))
		}
		j, err := humanevalx.Job(lang, ps[0], true, "x-0", limits.Duration(time.Minute))
		if err != nil || j.Image != humanevalx.Languages[lang] || j.Labels["language"] != lang || j.Labels["task_id"] != ps[0].TaskID {
			t.Errorf("%s: %+v, %v", lang, j, err)
		}
		j.Normalize()
		if err := j.Validate(); err != nil {
			t.Errorf("%s: invalid job: %v", lang, err)
		}
	}
}

// TestHumanEvalX runs the first 5 problems of each language, canonical
// (must succeed) and broken (must fail), on real Docker with the langs
// image. It skips, saying why, without the data or the image.
func TestHumanEvalX(t *testing.T) {
	t.Parallel()
	dir := dataDir(t)
	if _, err := os.Stat(humanevalx.File(dir, "python")); err != nil {
		t.Skipf("HumanEval-X not found (%v): set HUMANEVALX=DIR, or put it in ../shared/data/humaneval-x; see docs/evals.md, \"HumanEval-X\"", err)
	}
	img, langs := os.Getenv("SANDFLEET_TEST_IMAGE"), os.Getenv("SANDFLEET_TEST_LANGS_IMAGE")
	if langs == "" {
		langs = executor.LangsImage
	}
	var cli *client.Client
	testutil.NeedDocker(t, func(ctx context.Context) (err error) {
		if cli, err = client.New(client.FromEnv); err != nil {
			return err
		}
		_, err = cli.Ping(ctx, client.PingOptions{})
		return err
	})
	t.Cleanup(func() { cli.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := cli.ImageInspect(ctx, langs); err != nil {
		msg := "needs the languages' image " + langs + " (make images-all, or SANDFLEET_TEST_LANGS_IMAGE=TAG): " + err.Error()
		if os.Getenv("SANDFLEET_REQUIRE_LANGS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	presets := executor.DefaultPresets()
	for n, p := range presets {
		if p.Image == executor.LangsImage {
			p.Image = langs
		} else if img != "" {
			p.Image = img
		}
		presets[n] = p
	}
	e, err := executor.New(executor.Config{Client: cli, Presets: presets, WorkerID: "test-humanevalx-" + strconv.Itoa(os.Getpid())})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })

	const perLang = 5
	type run struct {
		lang   string
		broken bool
		job    *jobs.Job
	}
	var runs []run
	for _, lang := range humanevalx.LanguageOrder {
		ps, err := humanevalx.Read(humanevalx.File(dir, lang))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range ps[:perLang] {
			for _, b := range []bool{false, true} {
				j, _ := humanevalx.Job(lang, p, b, "hexslice-"+lang+"-"+strconv.FormatBool(b)+"-"+p.TaskID[len(p.TaskID)-1:], limits.Duration(2*time.Minute))
				runs = append(runs, run{lang, b, j})
			}
		}
	}
	sem := make(chan struct{}, 2)
	var wg sync.WaitGroup
	for _, r := range runs {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
			defer cancel()
			res, err := e.Run(ctx, r.job, jobrun.Options{})
			switch {
			case err != nil:
				t.Errorf("%s %s: %v", r.lang, r.job.Labels["task_id"], err)
			case !r.broken && res.Status != jobs.StatusSucceeded:
				t.Errorf("%s %s canonical: %s (%s)\nstdout %.500s\nstderr %.1500s\ncompile %+v", r.lang, r.job.Labels["task_id"], res.Status, res.Error, res.Stdout, res.Stderr, res.Compile)
			case r.broken && res.Status == jobs.StatusSucceeded:
				t.Errorf("%s %s broken: succeeded", r.lang, r.job.Labels["task_id"])
			}
		})
	}
	wg.Wait()
}
