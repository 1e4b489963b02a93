package envelope

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
)

const (
	nonce = "00112233445566778899aabbccddeeff"
	key   = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
)

var seal = Seal{Nonce: nonce, Key: key}

func sample() *Header {
	return &Header{
		Argv:  []string{"python3", "main.py"},
		Env:   map[string]string{"K": "v=1"},
		Files: []File{{Name: "main.py", Data: []byte("print(1)")}, {Name: "bin/x", Data: []byte{0, 1, 2, 0xff}, Mode: 0o755}},
		Nonce: nonce,
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
		func(h *Header) { h.Nonce = "short" },
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

func TestTrailer(t *testing.T) {
	t.Parallel()
	rss, cpu := int64(1<<20), int64(5e6)
	job := "job said this, no newline"
	want := Trailer{Exit: 137, Signal: 9, MaxRSSBytes: &rss, CPUNanos: &cpu, StderrBytes: int64(len(job)), Error: strings.Repeat("e", 2000)}
	tr := seal.Append(nil, want)
	if len(tr) > MaxTrailerBytes {
		t.Fatalf("trailer is %d bytes, over MaxTrailerBytes", len(tr))
	}
	out := append([]byte(job), tr...)
	rest, got, ok := seal.Cut(out, Stderr)
	if !ok || string(rest) != job || got.Exit != 137 || got.Signal != 9 || *got.MaxRSSBytes != rss || got.CgroupPeakBytes != nil {
		t.Fatalf("Cut = %q %+v %v", rest, got, ok)
	}
	if _, _, ok := seal.Cut(out, Stdout); ok {
		t.Fatal("Cut accepted a trailer whose stdout count does not match the bytes before it")
	}

	forged := want
	forged.Exit, forged.Signal = 0, 0
	good := seal.Append(nil, forged)
	flip := func(b []byte, i int) []byte {
		b = bytes.Clone(b)
		b[i] ^= 1
		return b
	}
	exitAt := bytes.Index(tr, []byte(`"exit":137`)) + len(`"exit":13`)
	otherKey := Seal{Nonce: nonce, Key: strings.Repeat("f", 64)}
	for name, in := range map[string][]byte{
		"another nonce":           append([]byte(job), (Seal{Nonce: "ffffffffffffffff", Key: key}).Append(nil, want)...),
		"another key":             append([]byte(job), otherKey.Append(nil, forged)...),
		"no MAC":                  append([]byte(job), append(seal.Marker(), `{"exit":0,"stdout_bytes":0,"stderr_bytes":25}`+"\n"...)...),
		"altered exit":            append([]byte(job), flip(tr, exitAt)...),
		"altered MAC":             append([]byte(job), flip(tr, len(tr)-3)...),
		"bytes added before":      append([]byte(job+"!"), tr...),
		"bytes removed before":    append([]byte(job[1:]), tr...),
		"more output after":       append(append([]byte(job), tr...), "more"...),
		"cut short":               append([]byte(job), tr[:40]...),
		"trailer repeated":        append(append([]byte(job), tr...), tr...),
		"good but stdout counted": append([]byte(job), seal.Append(nil, Trailer{StdoutBytes: int64(len(job))})...),
	} {
		if rest, _, ok := seal.Cut(in, Stderr); ok || !bytes.Equal(rest, in) {
			t.Errorf("%s: Cut accepted %q", name, in)
		}
	}
	if _, got, ok := seal.Cut(append([]byte(job), good...), Stderr); !ok || got.Exit != 0 {
		t.Fatalf("a well-formed trailer with exit 0 was refused: %+v %v", got, ok)
	}
}

func FuzzCut(f *testing.F) {
	f.Add([]byte("out"))
	f.Add(seal.Append([]byte("x"), Trailer{StdoutBytes: 1}))
	f.Fuzz(func(t *testing.T, in []byte) {
		// Whatever the input, only a trailer signed with the key is taken,
		// and then what is left is exactly the bytes it counted.
		rest, tr, ok := seal.Cut(in, Stdout)
		if ok && (int64(len(rest)) != tr.StdoutBytes || !bytes.HasPrefix(in, rest)) {
			t.Fatalf("Cut(%q) = %q, %+v", in, rest, tr)
		}
		if ok {
			again := seal.Append(bytes.Clone(rest), tr)
			if _, tr2, ok2 := seal.Cut(again, Stdout); !ok2 || tr2.Exit != tr.Exit {
				t.Fatalf("round trip of %+v failed", tr)
			}
		}
	})
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
