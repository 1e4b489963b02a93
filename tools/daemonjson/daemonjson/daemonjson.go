// Package daemonjson edits the runtimes of a Docker daemon.json, keeping
// every other setting, so that a SIGHUP to dockerd makes the change take
// effect without a restart: deploy/runsc.sh registers gVisor with it (via
// tools/daemonjson), and the engine fault tests a runtime that fails.
package daemonjson

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"reflect"
)

// Register makes name the runtime at path with args in file (created when
// missing), and reports whether it changed the file: false when the
// runtime was already registered as asked.
func Register(file, name, path string, args []string) (bool, error) {
	return edit(file, func(runtimes map[string]any) bool {
		entry := map[string]any{"path": path}
		if len(args) > 0 {
			list := make([]any, len(args))
			for i, a := range args {
				list[i] = a
			}
			entry["runtimeArgs"] = list
		}
		if reflect.DeepEqual(runtimes[name], entry) {
			return false
		}
		runtimes[name] = entry
		return true
	})
}

// Unregister removes the runtime name from file, and reports whether it
// was there. The last one removed leaves "runtimes": {}.
func Unregister(file, name string) (bool, error) {
	return edit(file, func(runtimes map[string]any) bool {
		if _, ok := runtimes[name]; !ok {
			return false
		}
		delete(runtimes, name)
		return true
	})
}

// edit applies change to the runtimes of file and writes the file back,
// atomically, when change reports a change.
func edit(file string, change func(runtimes map[string]any) bool) (bool, error) {
	cfg := map[string]any{}
	mode := fs.FileMode(0o644)
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist):
	case err != nil:
		return false, err
	case len(bytes.TrimSpace(b)) == 0:
		// An empty daemon.json is no settings to dockerd (a touch is a
		// common set-up step).
	default:
		if err := json.Unmarshal(b, &cfg); err != nil {
			return false, fmt.Errorf("%s: %w", file, err)
		}
		if cfg == nil { // null
			cfg = map[string]any{}
		}
	}
	if st, err := os.Stat(file); err == nil {
		mode = st.Mode().Perm() // kept: a daemon.json of 0600 stays so
	}
	runtimes, _ := cfg["runtimes"].(map[string]any)
	if runtimes == nil {
		runtimes = map[string]any{}
	}
	if !change(runtimes) {
		return false, nil
	}
	// An empty object, not a missing key, once the last runtime goes:
	// dockerd's reload replaces its runtimes only when daemon.json sets
	// the key, and keeps the removed runtime otherwise (Docker 20.10).
	cfg["runtimes"] = runtimes
	out, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return false, err
	}
	tmp := file + ".sandfleet.tmp"
	if err := os.WriteFile(tmp, append(out, '\n'), mode); err != nil {
		return false, err
	}
	if err := os.Chmod(tmp, mode); err != nil { // past the umask
		return false, err
	}
	if err := os.Rename(tmp, file); err != nil {
		return false, err
	}
	return true, nil
}
