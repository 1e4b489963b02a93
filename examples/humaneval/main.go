// Command humaneval turns the HumanEval problems (HumanEval.jsonl.gz) into a
// sandfleet batch: one python job per problem whose code is the prompt, a
// solution, the problem's tests and a call of check(entry_point). With
// --broken every solution is replaced by one that returns None, so each job
// must fail; a harness that reports those as succeeded is broken.
//
//	go run ./examples/humaneval -in HumanEval.jsonl.gz -o humaneval.jsonl
//	bin/submit batch humaneval.jsonl -o results.jsonl
package main

import (
	"bufio"
	"compress/gzip"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/sandfleet/sandfleet/pkg/jobs"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

type problem struct {
	TaskID            string `json:"task_id"`
	Prompt            string `json:"prompt"`
	EntryPoint        string `json:"entry_point"`
	CanonicalSolution string `json:"canonical_solution"`
	Test              string `json:"test"`
}

func main() {
	if err := run(os.Args[1:], os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "humaneval:", err)
		os.Exit(2)
	}
}

func run(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("humaneval", flag.ContinueOnError)
	in := fs.String("in", "../shared/data/humaneval/HumanEval.jsonl.gz", "HumanEval problems, gzipped JSONL")
	out := fs.String("o", "-", "where to write the batch (JSONL); - is stdout")
	broken := fs.Bool("broken", false, "replace every solution with one that returns None (each job must fail)")
	prefix := fs.String("prefix", "", "job ID prefix (default humaneval- or humaneval-broken-)")
	timeout := fs.String("timeout", "20s", "per-job timeout")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *prefix == "" {
		*prefix = "humaneval-"
		if *broken {
			*prefix = "humaneval-broken-"
		}
	}
	to, err := limits.ParseDuration(*timeout)
	if err != nil {
		return err
	}

	f, err := os.Open(*in)
	if err != nil {
		return err
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		return fmt.Errorf("%s: %w", *in, err)
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

	dec := json.NewDecoder(zr)
	n := 0
	for {
		var p problem
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return fmt.Errorf("%s: problem %d: %w", *in, n+1, err)
		}
		solution := p.CanonicalSolution
		if *broken {
			solution = "    return None\n"
		}
		job := jobs.Job{
			ID:     *prefix + strings.ReplaceAll(strings.TrimPrefix(p.TaskID, "HumanEval/"), "/", "-"),
			Image:  "python",
			Code:   p.Prompt + solution + "\n" + p.Test + "\n\ncheck(" + p.EntryPoint + ")\n",
			Labels: map[string]string{"task_id": p.TaskID, "suite": "humaneval"},
		}
		job.Limits.Timeout = to
		if err := enc.Encode(&job); err != nil {
			return err
		}
		n++
	}
	if err := bw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "humaneval: wrote %d jobs\n", n)
	return nil
}
