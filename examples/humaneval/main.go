// Command humaneval turns a file of problems in HumanEval's shape into a
// sandfleet batch: one python job per problem whose code is the prompt, a
// solution, the problem's tests and a call of check(entry_point). With
// --broken every solution is replaced by one that returns None, so each job
// must fail; a harness that reports those as succeeded is broken.
//
// The verdict is the program's exit status, as in HumanEval's own harness:
// the completion runs in the same process as the checks, so a completion
// that games them (an atexit handler calling os._exit(0), say) passes.
// Judge code that may be hostile with judged jobs (jobs.Job.Tests), whose
// expected output never enters the sandbox.
//
// The project's own problems are examples/problems/problems.jsonl.
// HumanEval itself is not in the repository: get data/HumanEval.jsonl.gz
// from https://github.com/openai/human-eval.
//
//	go run ./examples/humaneval -in examples/problems/problems.jsonl -prefix examples- -o examples.jsonl
//	go run ./examples/humaneval -in path/to/HumanEval.jsonl.gz -o humaneval.jsonl
//	bin/submit batch humaneval.jsonl -o results.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sandfleet/sandfleet/examples/problems"
	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "humaneval:", err)
		}
		os.Exit(2)
	}
}

// errNoInput says what -in wants and where HumanEval comes from.
var errNoInput = errors.New("-in is required: examples/problems/problems.jsonl (the project's own problems), " +
	"or HumanEval's data/HumanEval.jsonl.gz from https://github.com/openai/human-eval")

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("humaneval", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "problems in HumanEval's shape, JSONL, gzipped or not (required)")
	out := fs.String("o", "-", "where to write the batch (JSONL); - is stdout")
	broken := fs.Bool("broken", false, "replace every solution with one that returns None (each job must fail)")
	prefix := fs.String("prefix", "", "job ID prefix (default from the task IDs: HumanEval/12 is humaneval-12, or humaneval-broken-12)")
	timeout := fs.String("timeout", "20s", "per-job timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *in == "" {
		return errNoInput
	}
	to, err := limits.ParseDuration(*timeout)
	if err != nil {
		return err
	}
	ps, err := problems.Open(*in)
	if err != nil {
		return err
	}

	w := stdout
	if *out != "-" {
		of, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer of.Close()
		w = of
	}
	bw := bufio.NewWriter(w)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	for _, p := range ps {
		solution := p.CanonicalSolution
		if *broken {
			solution = problems.BrokenSolution
		}
		id := *prefix
		if id == "" {
			id = defaultPrefix(p, *broken)
		}
		job := jobs.Job{
			ID:     id + p.Name(),
			Image:  "python",
			Code:   p.Code(solution),
			Labels: map[string]string{"task_id": p.TaskID, "suite": "humaneval"},
		}
		job.Limits.Timeout = to
		if err := enc.Encode(&job); err != nil {
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "humaneval: wrote %d jobs\n", len(ps))
	return nil
}

// defaultPrefix names a problem's jobs after its set, so that two sets
// never share job IDs (and stored results): HumanEval/12 is humaneval-12,
// sandfleet/3 is sandfleet-3, and broken-solution jobs add "broken-".
func defaultPrefix(p problems.Problem, broken bool) string {
	set := strings.ToLower(strings.TrimSuffix(p.TaskID, "/"+p.Name()))
	if set == "" || set == strings.ToLower(p.TaskID) {
		set = "problem"
	}
	set = strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '_' || r == '-' {
			return r
		}
		return '-'
	}, set)
	if broken {
		return set + "-broken-"
	}
	return set + "-"
}
