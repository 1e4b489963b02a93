package daemonjson

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

func TestRegisterKeepsOtherSettings(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "daemon.json")
	orig := `{"storage-driver": "overlay2", "runtimes": {"runsc": {"path": "/usr/bin/runsc"}}}`
	if err := os.WriteFile(file, []byte(orig), 0o644); err != nil {
		t.Fatal(err)
	}
	read := func() map[string]any { return readJSON(t, file) }
	var before map[string]any
	_ = json.Unmarshal([]byte(orig), &before)

	steps := []struct {
		name    string
		do      func() (bool, error)
		changed bool
	}{
		{"register", func() (bool, error) { return Register(file, "broken", "/tmp/rt", []string{"--x"}) }, true},
		{"register again", func() (bool, error) { return Register(file, "broken", "/tmp/rt", []string{"--x"}) }, false},
		{"unregister", func() (bool, error) { return Unregister(file, "broken") }, true},
		{"unregister again", func() (bool, error) { return Unregister(file, "broken") }, false},
	}
	for _, s := range steps {
		changed, err := s.do()
		if err != nil || changed != s.changed {
			t.Fatalf("%s: changed %v, %v; want %v", s.name, changed, err, s.changed)
		}
		if s.name == "register" {
			rt := read()["runtimes"].(map[string]any)
			if !reflect.DeepEqual(rt["broken"], map[string]any{"path": "/tmp/rt", "runtimeArgs": []any{"--x"}}) || rt["runsc"] == nil {
				t.Fatalf("runtimes after register: %v", rt)
			}
		}
	}
	if after := read(); !reflect.DeepEqual(after, before) {
		t.Fatalf("after register and unregister: %v, want %v", after, before)
	}
}

// Removing the last runtime leaves the key, empty: a daemon.json without
// it would make dockerd's reload keep the runtime (it replaces its
// runtimes only when the key is set), as the engine fault test saw.
func TestUnregisterLastKeepsTheKey(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "daemon.json")
	if err := os.WriteFile(file, []byte(`{"mtu": 1400}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Register(file, "broken", "/tmp/rt", nil); err != nil {
		t.Fatal(err)
	}
	if changed, err := Unregister(file, "broken"); err != nil || !changed {
		t.Fatalf("unregister: changed %v, %v", changed, err)
	}
	m := readJSON(t, file)
	if rt, ok := m["runtimes"].(map[string]any); !ok || len(rt) != 0 || len(m) != 2 || m["mtu"] != 1400.0 {
		t.Fatalf("daemon.json after removing the last runtime: %v", m)
	}
}

func readJSON(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

// An empty daemon.json (a touch), one of blanks, or null is no settings,
// as dockerd reads it; the file keeps its mode.
func TestRegisterInEmptyDaemonJSON(t *testing.T) {
	t.Parallel()
	for name, content := range map[string]string{"empty": "", "whitespace": "\n  \n", "null": "null"} {
		t.Run(name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "daemon.json")
			if err := os.WriteFile(file, []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			changed, err := Register(file, "runsc", "/usr/bin/runsc", []string{"--network=none"})
			if err != nil || !changed {
				t.Fatalf("Register: changed %v, %v", changed, err)
			}
			if rt, _ := readJSON(t, file)["runtimes"].(map[string]any); rt["runsc"] == nil {
				t.Errorf("runtimes after Register: %v", rt)
			}
			if st, err := os.Stat(file); err != nil || st.Mode().Perm() != 0o600 {
				t.Errorf("mode after Register: %v %v", st.Mode(), err)
			}
		})
	}
}
