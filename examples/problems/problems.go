// Package problems reads code-generation problems in the JSONL shape of
// OpenAI's HumanEval (task_id, prompt, entry_point, canonical_solution,
// test), plain or gzipped, and turns each into a sandfleet job whose code is
// the prompt, a solution, the tests and a call of check(entry_point).
//
// problems.jsonl beside this file is the project's own small set, written
// for sandfleet, and Examples returns it. HumanEval itself is not part of
// the repository: get data/HumanEval.jsonl.gz from
// https://github.com/openai/human-eval and pass its path to Open.
package problems

import (
	"bufio"
	"bytes"
	"compress/gzip"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Problem is one line of a problem file.
type Problem struct {
	TaskID            string `json:"task_id"`
	Prompt            string `json:"prompt"`
	EntryPoint        string `json:"entry_point"`
	CanonicalSolution string `json:"canonical_solution"`
	Test              string `json:"test"`
}

// BrokenSolution replaces a solution to check a harness: every problem's
// tests must fail with it.
const BrokenSolution = "    return None\n"

// Code is the Python program of the problem with this solution (the body of
// the prompt's function): it exits 0 exactly when the tests pass.
func (p Problem) Code(solution string) string {
	return p.Prompt + solution + "\n" + p.Test + "\n\ncheck(" + p.EntryPoint + ")\n"
}

// Name is the last part of the task ID ("HumanEval/12" → "12"), for job IDs.
func (p Problem) Name() string {
	return p.TaskID[strings.LastIndexByte(p.TaskID, '/')+1:]
}

//go:embed problems.jsonl
var examples []byte

// Examples returns the project's own problems (problems.jsonl).
func Examples() []Problem {
	ps, err := Read(bytes.NewReader(examples))
	if err != nil {
		panic("problems.jsonl: " + err.Error()) // a test of this package reads it
	}
	return ps
}

// Open reads a problem file, gzipped (HumanEval.jsonl.gz) or not.
func Open(path string) ([]Problem, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	ps, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return ps, nil
}

// Read reads problems, one JSON object per line, gzipped or not, and checks
// that each has what Code needs.
func Read(r io.Reader) ([]Problem, error) {
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		defer zr.Close()
		br = bufio.NewReader(zr)
	}
	var out []Problem
	dec := json.NewDecoder(br)
	for {
		var p Problem
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, fmt.Errorf("problem %d: %w", len(out)+1, err)
		}
		if p.TaskID == "" || p.Prompt == "" || p.EntryPoint == "" || p.Test == "" {
			return nil, fmt.Errorf("problem %d (%q): task_id, prompt, entry_point and test are required", len(out)+1, p.TaskID)
		}
		out = append(out, p)
	}
}
