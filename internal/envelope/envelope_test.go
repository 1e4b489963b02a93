package envelope

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
)

const key = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

var seal = Seal{Key: key}

func sample() *Header {
	return &Header{
		Argv:  []string{"python3", "main.py"},
		Env:   map[string]string{"K": "v=1"},
		Files: []File{{Name: "main.py", Data: []byte("print(1)")}, {Name: "bin/x", Data: []byte{0, 1, 2, 0xff}, Mode: 0o755}},
		Key:   key,
	}
}

func TestRoundTripLeavesStdin(t *testing.T) {
	t.Parallel()
	b, err := Marshal(sample())
	if err != nil {
		t.Fatal(err)
	}
	stdin := "\x00job stdin\xff"
	r := bytes.NewReader(append(b, stdin...))
	h, err := Decode(r)
	if err != nil {
		t.Fatal(err)
	}
	if h.Argv[1] != "main.py" || h.Env["K"] != "v=1" || !bytes.Equal(h.Files[1].Data, []byte{0, 1, 2, 0xff}) || h.Files[1].Mode != 0o755 {
		t.Fatalf("decoded %+v", h)
	}
	rest, _ := io.ReadAll(r)
	if string(rest) != stdin {
		t.Fatalf("Decode consumed past the header: rest %q", rest)
	}
}

// oneByte hands out one byte per Read, as a pipe may: Decode must not rely
// on larger reads.
type oneByte struct{ r io.Reader }

func (o oneByte) Read(p []byte) (int, error) { return o.r.Read(p[:min(1, len(p))]) }

func TestDecodeByteAtATime(t *testing.T) {
	t.Parallel()
	b, _ := Marshal(sample())
	r := bytes.NewReader(append(b, 'Z'))
	if _, err := Decode(oneByte{r}); err != nil {
		t.Fatal(err)
	}
	if c, _ := r.ReadByte(); c != 'Z' {
		t.Fatalf("next byte %q, want Z", c)
	}
}

func TestDecodeErrors(t *testing.T) {
	t.Parallel()
	good, _ := Marshal(sample())
	body := good[bytes.IndexByte(good, '\n')+1:]
	cases := map[string]string{
		"empty":          "",
		"no newline":     "SANDFLEET1 12",
		"wrong magic":    "SANDFLEET2 2\n{}",
		"no length":      "SANDFLEET1 \n",
		"leading zero":   "SANDFLEET1 012\n",
		"negative":       "SANDFLEET1 -1\n",
		"huge":           "SANDFLEET1 99999999999\n",
		"long line":      "SANDFLEET1 " + strings.Repeat("1", 40) + "\n",
		"short body":     "SANDFLEET1 100\n{}",
		"not json":       "SANDFLEET1 3\nabc",
		"unknown field":  "SANDFLEET1 51\n" + `{"argv":["a"],"nonce":"0011223344556677","extra":1}`,
		"trailing json":  "SANDFLEET1 42\n" + `{"argv":["a"],"nonce":"0011223344556677"}{}`,
		"empty argv":     "SANDFLEET1 35\n" + `{"argv":[],"nonce":"0011223344556677"}`,
		"bad nonce":      "SANDFLEET1 27\n" + `{"argv":["a"],"nonce":"XYZ"}`,
		"escaping file":  "SANDFLEET1 80\n" + `{"argv":["a"],"nonce":"0011223344556677","files":[{"name":"../x","data":""}]}`,
		"truncated body": "SANDFLEET1 " + itoa(len(body)) + "\n" + string(body[:len(body)-1]),
	}
	for name, in := range cases {
		if _, err := Decode(strings.NewReader(in)); !errors.Is(err, ErrFormat) {
			t.Errorf("%s: err = %v, want ErrFormat", name, err)
		}
	}
}

func itoa(n int) string {
	var b []byte
	for {
		b = append([]byte{byte('0' + n%10)}, b...)
		if n /= 10; n == 0 {
			return string(b)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	bad := []func(h *Header){
		func(h *Header) { h.Argv = nil },
		func(h *Header) { h.Argv = []string{""} },
		func(h *Header) { h.Argv = []string{"a\x00b"} },
		func(h *Header) { h.Env = map[string]string{"A=B": "c"} },
		func(h *Header) { h.Env = map[string]string{"": "c"} },
		func(h *Header) { h.Dir = "relative" },
		func(h *Header) { h.Files = append(h.Files, File{Name: "main.py"}) },
		func(h *Header) { h.Files = append(h.Files, File{Name: "main.py/x"}) },
		func(h *Header) { h.Files = []File{{Name: "/etc/passwd"}} },
		func(h *Header) { h.Files = []File{{Name: "a//b"}} },
		func(h *Header) { h.Files = []File{{Name: "a", Mode: 0o4755}} },
		func(h *Header) { h.Key = "" },
		func(h *Header) { h.Key = strings.ToUpper(key) },
		func(h *Header) { h.Key = key[:62] },
	}
	for i, mod := range bad {
		h := sample()
		mod(h)
		if err := h.Validate(); !errors.Is(err, ErrFormat) {
			t.Errorf("case %d: Validate = %v, want ErrFormat", i, err)
		}
		if _, err := Marshal(h); err == nil {
			t.Errorf("case %d: Marshal accepted an invalid header", i)
		}
	}
}

// The skips an archive lists fit the trailer: a long name shortened, as
// many as fit listed, their count whole.
func TestTrailerSkips(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("D", 1100)
	var skips []ArchiveSkip
	for i := range 100 {
		skips = append(skips, ArchiveSkip{Name: fmt.Sprintf("%s/%d", long[:900], i), Reason: "the path is 904 bytes"})
	}
	skips[0].Name = strings.Repeat("x", 5000)
	tr := seal.Sign(Trailer{ArchiveSkipped: 1000, ArchiveSkips: skips})
	got, ok := seal.Open(tr)
	if !ok || len(tr) > MaxTrailerBytes {
		t.Fatalf("a trailer of %d bytes does not open", len(tr))
	}
	if n := len(got.ArchiveSkips); n < 10 || n == 100 || got.ArchiveSkipped != 1000 {
		t.Fatalf("%d skips listed of %d counted; want some, not all", n, got.ArchiveSkipped)
	}
	if s := got.ArchiveSkips[0].Name; len(s) > maxSkipNameBytes+3 || !strings.HasPrefix(s, "xxx") {
		t.Fatalf("a 5000-byte name came as %d bytes", len(s))
	}
	if got.ArchiveSkips[1] != skips[1] {
		t.Fatalf("skip %+v, want %+v", got.ArchiveSkips[1], skips[1])
	}
	if skips[0].Name != strings.Repeat("x", 5000) {
		t.Fatal("Sign changed its caller's skips")
	}
}

func TestTrailer(t *testing.T) {
	t.Parallel()
	rss, cpu := int64(1<<20), int64(5e6)
	want := Trailer{Exit: 137, Signal: 9, MaxRSSBytes: &rss, CPUNanos: &cpu, StderrBytes: 25, Error: strings.Repeat("e", 2000)}
	tr := seal.Sign(want)
	if len(tr) > MaxTrailerBytes {
		t.Fatalf("trailer is %d bytes, over MaxTrailerBytes", len(tr))
	}
	got, ok := seal.Open(tr)
	if !ok || got.Exit != 137 || got.Signal != 9 || *got.MaxRSSBytes != rss || got.CgroupPeakBytes != nil || got.StderrBytes != 25 {
		t.Fatalf("Open = %+v %v", got, ok)
	}
	flip := func(b []byte, i int) []byte {
		b = bytes.Clone(b)
		b[i] ^= 1
		return b
	}
	exitAt := bytes.Index(tr, []byte(`"exit":137`)) + len(`"exit":13`)
	otherKey := Seal{Key: strings.Repeat("f", 64)}
	for name, in := range map[string][]byte{
		"another key":  otherKey.Sign(Trailer{Exit: 0}),
		"no MAC":       []byte(`{"exit":0,"stdout_bytes":0,"stderr_bytes":25}`),
		"altered exit": flip(tr, exitAt),
		"altered MAC":  flip(tr, len(tr)-3),
		"cut short":    tr[:40],
		"extended":     append(bytes.Clone(tr), ' '),
		"empty":        nil,
	} {
		if _, ok := seal.Open(in); ok {
			t.Errorf("%s: Open accepted %q", name, in)
		}
	}
}

func TestDeframer(t *testing.T) {
	t.Parallel()
	var stream []byte
	stream = AppendFrame(stream, FrameStdout, []byte("out"))
	stream = AppendFrame(stream, FrameStderr, []byte("err"))
	stream = AppendFrame(stream, FrameStdout, nil)
	stream = AppendFrame(stream, FrameTrailer, []byte("t"))
	// Fed in every split: one byte at a time and all at once give the same frames.
	for _, step := range []int{1, 2, 3, 7, len(stream)} {
		var got []string
		d := &Deframer{Handle: func(kind byte, p []byte) { got = append(got, string(kind)+":"+string(p)) }}
		for i := 0; i < len(stream); i += step {
			d.Write(stream[i:min(i+step, len(stream))])
		}
		if strings.Join(got, ",") != "o:out,e:err,o:,t:t" || !d.Complete() {
			t.Errorf("step %d: frames %q complete %v err %v", step, got, d.Complete(), d.Err())
		}
	}
	for name, in := range map[string][]byte{
		"after the trailer": append(bytes.Clone(stream), 'x'),
		"unknown kind":      AppendFrame(nil, 'z', nil),
		"oversized":         {FrameStdout, 0xff, 0xff, 0xff, 0xff},
		"cut short":         stream[:len(stream)-1],
		"no trailer":        AppendFrame(nil, FrameStdout, []byte("x")),
	} {
		d := &Deframer{Handle: func(byte, []byte) {}}
		d.Write(in)
		if d.Complete() {
			t.Errorf("%s: complete", name)
		}
	}
}

func FuzzDeframer(f *testing.F) {
	f.Add(AppendFrame(AppendFrame(nil, FrameStdout, []byte("x")), FrameTrailer, []byte("t")), 3)
	f.Add([]byte{FrameStdout, 0, 0, 0}, 1)
	f.Fuzz(func(t *testing.T, in []byte, step int) {
		step = 1 + (step&0xff)%17
		// Any input, in any split, gives the same frames; payloads are
		// never over the limit.
		var a, b []string
		da := &Deframer{Handle: func(k byte, p []byte) {
			if len(p) > MaxFramePayload {
				t.Fatalf("payload of %d bytes", len(p))
			}
			a = append(a, string(k)+string(p))
		}}
		da.Write(in)
		db := &Deframer{Handle: func(k byte, p []byte) { b = append(b, string(k)+string(p)) }}
		for i := 0; i < len(in); i += step {
			db.Write(in[i:min(i+step, len(in))])
		}
		if strings.Join(a, "\x00") != strings.Join(b, "\x00") || da.Complete() != db.Complete() {
			t.Fatalf("split %d changed the frames: %q vs %q", step, a, b)
		}
	})
}

func FuzzOpen(f *testing.F) {
	f.Add(seal.Sign(Trailer{Exit: 1}))
	f.Add([]byte(`{"exit":0} 00`))
	f.Fuzz(func(t *testing.T, in []byte) {
		// Whatever the input, only a trailer signed with the key opens, and
		// what opens signs again to the same payload.
		tr, ok := seal.Open(in)
		if ok && !bytes.Equal(seal.Sign(tr), in) && !json.Valid(in[:len(in)-65]) {
			t.Fatalf("opened %q", in)
		}
		if _, ok := (Seal{Key: strings.Repeat("a", 64)}).Open(in); ok && bytes.Equal(in, seal.Sign(tr)) {
			t.Fatalf("opened under another key: %q", in)
		}
	})
}

func FuzzDecode(f *testing.F) {
	good, _ := Marshal(sample())
	f.Add(good)
	f.Add(append(good, "stdin"...))
	judged := sample()
	judged.Compile = []string{"gcc", "-o", "/tmp/main", "main.c"}
	judged.Tests = &Tests{OutputLimit: 1 << 20, StopOnFirstFailure: true, Cases: []Case{
		{Stdin: []byte("1 2\n"), Args: []string{"-v"}, Expected: []byte("3\n"), TimeoutMS: 1000, Compare: "float", Tolerance: 1e-6},
	}}
	if b, err := Marshal(judged); err == nil {
		f.Add(b)
	} else {
		f.Fatalf("a judged header: %v", err)
	}
	f.Add([]byte("SANDFLEET1 2\n{}"))
	f.Add([]byte("SANDFLEET1 99999999\n"))
	f.Add([]byte("\n"))
	f.Fuzz(func(t *testing.T, in []byte) {
		r := bytes.NewReader(in)
		h, err := Decode(r)
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		// A header that decodes is valid, re-encodes, and decodes the same.
		if err := h.Validate(); err != nil {
			t.Fatalf("Decode returned an invalid header: %v", err)
		}
		b, err := Marshal(h)
		if err != nil {
			t.Fatalf("re-encoding: %v", err)
		}
		h2, err := Decode(bytes.NewReader(b))
		if err != nil {
			t.Fatalf("decoding the re-encoding: %v", err)
		}
		b2, _ := Marshal(h2)
		if !bytes.Equal(b, b2) {
			t.Fatalf("not stable:\n%q\n%q", b, b2)
		}
		// Decode stops exactly at the end of the header.
		nl := bytes.IndexByte(in, '\n')
		n, _ := strconv.Atoi(string(in[len(Magic)+1 : nl]))
		if consumed := len(in) - r.Len(); consumed != nl+1+n {
			t.Fatalf("Decode consumed %d bytes, the header is %d", consumed, nl+1+n)
		}
	})
}

// A message cut into parts comes back whole, whatever its size, with the
// parts of other messages between them; a reply or an event signed with
// another key, or changed, is refused.
func TestSessionMessages(t *testing.T) {
	t.Parallel()
	big := bytes.Repeat([]byte("x"), 3*MaxFramePayload+17)
	var stream []byte
	stream = AppendMessage(stream, FrameReplyPart, FrameReply, 1, big)
	stream = AppendMessage(stream, FrameReplyPart, FrameReply, 2, []byte("small"))
	asm := NewAssembler(4)
	got := map[uint64][]byte{}
	d := Deframer{Handle: func(kind byte, p []byte) {
		id, msg, done, err := asm.Add(p, kind == FrameReply)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			got[id] = append([]byte(nil), msg...)
		}
	}}
	for len(stream) > 0 { // in odd pieces
		n := min(len(stream), 7777)
		_, _ = d.Write(stream[:n])
		stream = stream[n:]
	}
	if d.Err() != nil || !bytes.Equal(got[1], big) || string(got[2]) != "small" {
		t.Fatalf("err %v, got %d and %q", d.Err(), len(got[1]), got[2])
	}

	seal, other := NewSeal(), NewSeal()
	msg := seal.SignReply(&Reply{ID: 9, Result: json.RawMessage(`{"exit_code":3}`)})
	var res struct {
		Exit int `json:"exit_code"`
	}
	if r, err := seal.OpenReply(msg); err != nil || r.Decode(&res) != nil || res.Exit != 3 {
		t.Fatalf("open: %+v %v", r, err)
	}
	forged := bytes.Replace(msg, []byte(`"exit_code":3`), []byte(`"exit_code":0`), 1)
	for name, m := range map[string][]byte{"changed": forged, "another key": other.SignReply(&Reply{ID: 9})} {
		if _, err := seal.OpenReply(m); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := seal.OpenEvent(msg); err == nil {
		t.Error("a reply passed for an event")
	}
}
