package executor

import (
	"archive/tar"
	"bytes"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestMergeUserTables(t *testing.T) {
	t.Parallel()
	const uid = 123456
	for _, tc := range []struct {
		name, passwd, group   string
		wantPasswd, wantGroup string
	}{
		{
			name:       "no tables",
			wantPasswd: "sandbox:x:123456:123456:sandbox:/workspace:/bin/sh\n",
			wantGroup:  "sandbox:x:123456:\n",
		},
		{
			name: "the sandbox image's: its own sandbox (10001) replaced",
			passwd: "root:x:0:0:root:/root:/bin/bash\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" +
				"sandbox:x:10001:10001::/workspace:/usr/sbin/nologin\n",
			group: "root:x:0:\nsandbox:x:10001:\n",
			wantPasswd: "root:x:0:0:root:/root:/bin/bash\n" +
				"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n" +
				"sandbox:x:123456:123456:sandbox:/workspace:/bin/sh\n",
			wantGroup: "root:x:0:\nsandbox:x:123456:\n",
		},
		{
			name:       "an entry of the uid under another name, and no final newline",
			passwd:     "root:x:0:0:root:/root:/bin/bash\nsquatter:x:123456:0::/:/bin/sh",
			group:      "wheel:x:123456:root\nstaff:x:50:",
			wantPasswd: "root:x:0:0:root:/root:/bin/bash\nsandbox:x:123456:123456:sandbox:/workspace:/bin/sh\n",
			wantGroup:  "staff:x:50:\nsandbox:x:123456:\n",
		},
		{
			name:       "sandbox a member of other groups: taken out, the others kept",
			passwd:     "# a comment\n\nbuilder:x:2000:2000::/home/builder:/bin/sh\n",
			group:      "docker:x:999:sandbox\nadm:x:4:syslog,sandbox,builder\n",
			wantPasswd: "# a comment\n\nbuilder:x:2000:2000::/home/builder:/bin/sh\nsandbox:x:123456:123456:sandbox:/workspace:/bin/sh\n",
			wantGroup:  "docker:x:999:\nadm:x:4:syslog,builder\nsandbox:x:123456:\n",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if got := string(mergePasswd([]byte(tc.passwd), uid)); got != tc.wantPasswd {
				t.Errorf("passwd:\n%s\nwant:\n%s", got, tc.wantPasswd)
			}
			if got := string(mergeGroup([]byte(tc.group), uid)); got != tc.wantGroup {
				t.Errorf("group:\n%s\nwant:\n%s", got, tc.wantGroup)
			}
		})
	}
}

// Whatever an image's tables hold (a template's are its tenant's), the
// merged ones end with the sandbox's entry, hold no other entry of its
// uid or name, and keep every other line.
func FuzzMergeUserTables(f *testing.F) {
	f.Add([]byte("root:x:0:0:root:/root:/bin/bash\nsandbox:x:10001:10001::/workspace:/usr/sbin/nologin\n"), uint32(100000))
	f.Add([]byte("a:x:7:sandbox,sandbox\n:::\nsandbox\n\n\x00"), uint32(7))
	f.Fuzz(func(t *testing.T, table []byte, uid uint32) {
		id := strconv.FormatUint(uint64(uid), 10)
		in := len(slices.Collect(strings.Lines(string(table))))
		for i, merge := range []func([]byte, uint32) []byte{mergePasswd, mergeGroup} {
			out := string(merge(table, uid))
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			last := lines[len(lines)-1]
			if !strings.HasPrefix(last, SandboxUser+":x:"+id+":") {
				t.Fatalf("last line %q, want the sandbox's", last)
			}
			for _, l := range lines[:len(lines)-1] {
				f := strings.Split(l, ":")
				if f[0] == SandboxUser || len(f) > 2 && f[2] == id {
					t.Fatalf("line %q names the sandbox's uid or name", l)
				}
				if i == 1 && len(f) == 4 && slices.Contains(strings.Split(f[3], ","), SandboxUser) {
					t.Fatalf("group line %q has the sandbox as a member", l)
				}
			}
			if len(lines)-1 > in {
				t.Fatalf("%d lines kept of %d", len(lines)-1, in)
			}
		}
	})
}

func TestFirstFile(t *testing.T) {
	t.Parallel()
	archive := func(h *tar.Header, body []byte) *bytes.Buffer {
		var b bytes.Buffer
		w := tar.NewWriter(&b)
		h.Size = int64(len(body))
		if err := w.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		w.Write(body)
		w.Close()
		return &b
	}
	h, data, err := firstFile(archive(&tar.Header{Name: "passwd", Typeflag: tar.TypeReg, Mode: 0o644}, []byte("root:x:0:0::/:/bin/sh\n")))
	if err != nil || h.Typeflag != tar.TypeReg || string(data) != "root:x:0:0::/:/bin/sh\n" {
		t.Errorf("a file: %v %q", err, data)
	}
	h, _, err = firstFile(archive(&tar.Header{Name: "passwd", Typeflag: tar.TypeSymlink, Linkname: "../usr/passwd"}, nil))
	if err != nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "../usr/passwd" {
		t.Errorf("a link: %v %+v", err, h)
	}
	big := bytes.Repeat([]byte("user:x:1:1::/:/bin/sh\n"), maxUserTable/20)
	if _, data, err = firstFile(archive(&tar.Header{Name: "passwd", Typeflag: tar.TypeReg, Mode: 0o644}, big)); err != nil ||
		len(data) > maxUserTable || !bytes.HasSuffix(data, []byte("/bin/sh\n")) || !bytes.HasPrefix(big, data) {
		t.Errorf("a table over the cap: %v, %d bytes kept, want at most %d, whole lines", err, len(data), maxUserTable)
	}
	if _, _, err = firstFile(strings.NewReader("not an archive")); err == nil {
		t.Error("garbage read as an archive")
	}
}

func TestUserEnv(t *testing.T) {
	t.Parallel()
	if got := userEnv([]string{"PATH=/bin"}); !slices.Equal(got, []string{"USER=sandbox", "LOGNAME=sandbox", "HOME=/workspace", "EMAIL=" + sandboxEmail}) {
		t.Errorf("an image that sets none: %q", got)
	}
	if got := userEnv([]string{"USER=me", "HOME=/home/me", "EMAIL="}); !slices.Equal(got, []string{"LOGNAME=sandbox"}) {
		t.Errorf("an image that sets USER, HOME and EMAIL: %q, want only LOGNAME", got)
	}
}

// A sandbox's tables are written readable by every uid whatever the
// umask, and removed with its uid.
func TestUserFilesWriteRemove(t *testing.T) {
	t.Parallel()
	u := newUserFiles("w/"+t.Name(), randHex(8))
	t.Cleanup(func() { os.RemoveAll(u.dir) })
	su, err := u.write(100001, userTables{passwd: []byte("root:x:0:0::/root:/bin/sh\n")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{su.passwd, su.group} {
		st, err := os.Stat(p)
		if err != nil || st.Mode().Perm() != 0o644 {
			t.Fatalf("%s: %v %v, want mode 0644", p, err, st)
		}
	}
	if b, _ := os.ReadFile(su.passwd); string(b) != "root:x:0:0::/root:/bin/sh\nsandbox:x:100001:100001:sandbox:/workspace:/bin/sh\n" {
		t.Errorf("passwd %q", b)
	}
	m := su.mounts()
	if len(m) != 2 || !m[0].ReadOnly || !m[1].ReadOnly || m[0].Target != "/etc/passwd" || m[1].Target != "/etc/group" || m[0].Source != su.passwd {
		t.Errorf("mounts %+v, want both tables read-only", m)
	}
	u.remove(100001)
	if _, err := os.Stat(su.passwd); !os.IsNotExist(err) {
		t.Errorf("passwd left after remove: %v", err)
	}
}
