// Command daemonjson registers an OCI runtime in a Docker daemon.json,
// keeping every other setting, so that a SIGHUP to dockerd makes it usable
// without a restart. It prints "unchanged" when the runtime is already
// registered as asked, "registered" when it wrote the file.
//
//	go run ./tools/daemonjson -file /etc/docker/daemon.json -name runsc -path /usr/bin/runsc -arg --network=none
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	"github.com/sandfleet/sandfleet/tools/daemonjson/daemonjson"
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
	changed, err := daemonjson.Register(*file, *name, *path, rargs)
	if err != nil {
		return err
	}
	if changed {
		fmt.Println("registered")
	} else {
		fmt.Println("unchanged")
	}
	return nil
}
