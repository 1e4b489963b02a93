package webauth

import (
	"net/http/httptest"
	"testing"
)

func TestBearer(t *testing.T) {
	for header, want := range map[string]string{
		"Bearer sft_x": "sft_x", "bearer  sft_x ": "sft_x", "Basic sft_x": "", "sft_x": "", "": "",
	} {
		if got := Bearer(header); got != want {
			t.Errorf("Bearer(%q) = %q, want %q", header, got, want)
		}
	}
}

// A write from another site is refused whichever header says so; a
// client that is no browser (neither header) is not.
func TestSameOrigin(t *testing.T) {
	for _, tc := range []struct {
		site, origin string
		want         bool
	}{
		{"", "", true},
		{"same-origin", "", true},
		{"none", "", true},
		{"", "http://gw.example:8080", true},
		{"cross-site", "", false},
		{"same-site", "", false},
		{"", "http://evil.example", false},
		{"", "http://gw.example:8081", false},
		{"", "::bad", false},
	} {
		r := httptest.NewRequest("POST", "http://gw.example:8080/v1/jobs", nil)
		if tc.site != "" {
			r.Header.Set("Sec-Fetch-Site", tc.site)
		}
		if tc.origin != "" {
			r.Header.Set("Origin", tc.origin)
		}
		if got := SameOrigin(r); got != tc.want {
			t.Errorf("Sec-Fetch-Site %q Origin %q: %v, want %v", tc.site, tc.origin, got, tc.want)
		}
	}
}

func TestLoopbackHost(t *testing.T) {
	for host, want := range map[string]bool{
		"localhost": true, "localhost:8080": true, "127.0.0.1:8080": true, "127.9.9.9": true, "[::1]:8080": true,
		"evil.example": false, "localhost.evil.example": false, "10.0.0.1:8080": false, "": false,
	} {
		if got := LoopbackHost(host); got != want {
			t.Errorf("LoopbackHost(%q) = %v, want %v", host, got, want)
		}
	}
}
