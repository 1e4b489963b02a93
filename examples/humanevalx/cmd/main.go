// Command humanevalx writes a HumanEval-X language's problems as a
// sandfleet batch: canonical solutions, or with --broken solutions that
// fail on purpose (each job must fail).
//
//	go run ./examples/humanevalx/cmd -dir ../shared/data/humaneval-x -lang cpp -o cpp.jsonl
//	bin/submit batch cpp.jsonl -o cpp.results.jsonl
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/sandfleet/sandfleet/examples/humanevalx"
	"github.com/sandfleet/sandfleet/pkg/limits"
)

func main() {
	if err := run(os.Args[1:], os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(os.Stderr, "humanevalx:", err)
		}
		os.Exit(2)
	}
}

func run(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("humanevalx", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("dir", "../shared/data/humaneval-x", "directory of humaneval_<lang>.jsonl.gz")
	lang := fs.String("lang", "", "python, cpp, java, js, go or rust (required)")
	out := fs.String("o", "-", "where to write the batch (JSONL); - is stdout")
	isBroken := fs.Bool("broken", false, "solutions that fail on purpose: each job must fail")
	limit := fs.Int("n", 0, "only the first N problems (0: all)")
	timeout := fs.String("timeout", "60s", "per-job timeout (compile step included)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if _, ok := humanevalx.Languages[*lang]; !ok {
		return fmt.Errorf("-lang must be one of python, cpp, java, js, go, rust")
	}
	to, err := limits.ParseDuration(*timeout)
	if err != nil {
		return err
	}
	ps, err := humanevalx.Read(humanevalx.File(*dir, *lang))
	if err != nil {
		return fmt.Errorf("%w (HumanEval-X is not part of this repository: see docs/evals.md, \"HumanEval-X\")", err)
	}
	w := stdout
	if *out != "-" {
		f, err := os.Create(*out)
		if err != nil {
			return err
		}
		defer f.Close()
		w = f
	}
	// IDs derived by submit batch from the content (--name), so that a
	// changed program never reuses an earlier one's result.
	n, err := humanevalx.Write(w, *lang, ps, *isBroken, "", to, *limit)
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "humanevalx: wrote %d %s jobs\n", n, *lang)
	return nil
}
