package jobs

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func TestOutputKeepsBytes(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		out      []byte
		encoding string
	}{
		{"text", []byte("héllo\n"), ""},
		{"empty", nil, ""},
		{"invalid utf-8", []byte{0xff, 0xfe, 0, 'a', '\n'}, EncodingBase64},
		{"cut rune", []byte("é")[:1], EncodingBase64},
		{"escape sequences are valid text", []byte("\x1b[2J\x1b]0;t\x07"), ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := &Result{ID: "x", Status: StatusSucceeded}
			r.SetOutput(tc.out, tc.out)
			if r.StdoutEncoding != tc.encoding || r.StderrEncoding != tc.encoding {
				t.Fatalf("encodings %q %q, want %q", r.StdoutEncoding, r.StderrEncoding, tc.encoding)
			}
			data, err := EncodeResult(r, 0)
			if err != nil {
				t.Fatal(err)
			}
			var back Result
			if err := json.Unmarshal(data, &back); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(back.StdoutBytes(), tc.out) || !bytes.Equal(back.StderrBytes(), tc.out) {
				t.Fatalf("round trip: %q / %q, want %q", back.StdoutBytes(), back.StderrBytes(), tc.out)
			}
		})
	}
}

func TestEncodeResultShortensBase64Whole(t *testing.T) {
	t.Parallel()
	r := &Result{ID: "x", Status: StatusSucceeded}
	r.SetOutput(bytes.Repeat([]byte{0xff, 0x00, 0x41}, 10000), []byte(strings.Repeat("<", 10000)))
	data, err := EncodeResult(r, 16<<10)
	if err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(data) > 16<<10 || !back.StdoutTruncated || len(back.Stdout)%4 != 0 {
		t.Fatalf("%d bytes, truncated %v, base64 of %d chars", len(data), back.StdoutTruncated, len(back.Stdout))
	}
	if got := back.StdoutBytes(); len(got) == 0 || !bytes.HasPrefix(bytes.Repeat([]byte{0xff, 0x00, 0x41}, 10000), got) {
		t.Fatalf("shortened stdout does not decode to a prefix of the output: %d bytes", len(got))
	}
}
