// Command daemonjson registers an OCI runtime in a Docker daemon.json,
// keeping every other setting, so that a SIGHUP to dockerd makes it usable
// without a restart. It prints "unchanged" when the runtime is already
// registered as asked, "registered" when it wrote the file.
//
//	go run ./tools/daemonjson -file /etc/docker/daemon.json -name runsc -path /usr/bin/runsc -arg --network=none
package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"reflect"
	"strings"
)

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, " ") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "daemonjson:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fl := flag.NewFlagSet("daemonjson", flag.ContinueOnError)
	file := fl.String("file", "/etc/docker/daemon.json", "the daemon's configuration file (created when missing)")
	name := fl.String("name", "", "the runtime's name, as in docker run --runtime NAME")
	path := fl.String("path", "", "the runtime's binary")
	var rargs stringList
	fl.Var(&rargs, "arg", "an argument the daemon passes to the runtime (repeatable)")
	if err := fl.Parse(args); err != nil {
		return err
	}
	if *name == "" || *path == "" {
		return errors.New("-name and -path are required")
	}
	cfg := map[string]any{}
	b, err := os.ReadFile(*file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return err
	default:
		if err := json.Unmarshal(b, &cfg); err != nil {
			return fmt.Errorf("%s: %w", *file, err)
		}
	}
	runtimes, _ := cfg["runtimes"].(map[string]any)
	if runtimes == nil {
		runtimes = map[string]any{}
	}
	entry := map[string]any{"path": *path}
	if len(rargs) > 0 {
		list := make([]any, len(rargs))
		for i, a := range rargs {
			list[i] = a
		}
		entry["runtimeArgs"] = list
	}
	if reflect.DeepEqual(runtimes[*name], entry) {
		fmt.Println("unchanged")
		return nil
	}
	runtimes[*name] = entry
	cfg["runtimes"] = runtimes
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	tmp := *file + ".sandfleet.tmp"
	if err := os.WriteFile(tmp, append(out, '\n'), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, *file); err != nil {
		return err
	}
	fmt.Println("registered")
	return nil
}
