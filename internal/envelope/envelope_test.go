package envelope

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/pkg/jobs"
)

const nonce = "00112233445566778899aabbccddeeff"

func sample() *Header {
	return &Header{
		Argv:  []string{"python3", "main.py"},
		Env:   map[string]string{"K": "v=1"},
		Files: []File{{Name: "main.py", Data: []byte("print(1)")}, {Name: "bin/x", Data: []byte{0, 1, 2, 0xff}, Mode: 0o755}},
		Nonce: nonce,
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
		func(h *Header) { h.Nonce = "short" },
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

// The launcher cannot import pkg/jobs; this keeps the two name checks in step.
func TestValidFileNameMatchesJobs(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"a", "a/b", "a.py", ".hidden", "..x", "", "/a", "a/", "a//b", "./a", "a/..", "a\x00", strings.Repeat("x", 255), strings.Repeat("x", 256)} {
		if (ValidFileName(n) == nil) != (jobs.ValidFileName(n) == nil) {
			t.Errorf("%q: envelope says %v, jobs says %v", n, ValidFileName(n), jobs.ValidFileName(n))
		}
	}
}

func TestTrailer(t *testing.T) {
	t.Parallel()
	rss, cpu := int64(1<<20), int64(5e6)
	want := Trailer{Exit: 137, Signal: 9, MaxRSSBytes: &rss, CPUNanos: &cpu, Error: strings.Repeat("e", 2000)}
	out := append([]byte("job said this, no newline"), AppendTrailer(nil, nonce, want)...)
	if len(out)-len("job said this, no newline") > MaxTrailerBytes {
		t.Fatalf("trailer is %d bytes, over MaxTrailerBytes", len(out))
	}
	rest, got, ok := CutTrailer(out, nonce)
	if !ok || string(rest) != "job said this, no newline" || got.Exit != 137 || got.Signal != 9 || *got.MaxRSSBytes != rss || got.CgroupPeakBytes != nil {
		t.Fatalf("CutTrailer = %q %+v %v", rest, got, ok)
	}
	// Another nonce, a trailer followed by more output, or a cut one: not a trailer.
	for _, in := range [][]byte{
		AppendTrailer(nil, "ffffffffffffffff", want),
		append(AppendTrailer(nil, nonce, want), "more"...),
		AppendTrailer(nil, nonce, want)[:40],
	} {
		if rest, _, ok := CutTrailer(in, nonce); ok || !bytes.Equal(rest, in) {
			t.Errorf("CutTrailer(%q) accepted it", in)
		}
	}
}

func FuzzDecode(f *testing.F) {
	good, _ := Marshal(sample())
	f.Add(good)
	f.Add(append(good, "stdin"...))
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
