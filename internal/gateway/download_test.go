package gateway_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandfleet/sandfleet/internal/fleet"
	"github.com/sandfleet/sandfleet/pkg/jobs"
)

// An artifact whose stored bytes no longer match the digest its result
// lists arrives short of its Content-Length, a read error for the client,
// never as a whole-looking 200.
func TestArtifactFailingItsDigestArrivesShort(t *testing.T) {
	t.Parallel()
	b := setup(t, options{})
	text := strings.Repeat("a", 16<<10)
	r := b.submit(t, `{"id":"dig-1","image":"python","workspace":"dig-ws","outputs":["big.bin"],"code":"write big.bin `+text+`"}`, "10s")
	if r.status != http.StatusOK {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	var res jobs.Result
	r.decode(t, &res)
	if len(res.Artifacts) != 1 {
		t.Fatalf("artifacts: %s", r.body)
	}
	a := res.Artifacts[0]
	if r := b.do(t, "GET", "/v1/jobs/dig-1/artifacts/big.bin", b.alice, nil); r.status != http.StatusOK || len(r.body) != int(a.Size) {
		t.Fatalf("the file as stored: %d, %d bytes", r.status, len(r.body))
	}
	store, err := b.js.ObjectStore(t.Context(), fleet.ArtifactsBucket)
	if err != nil {
		t.Fatal(err)
	}
	// The whole file, and as one chunk: the gateway has every byte before
	// the digest can be checked.
	if _, err := store.PutBytes(t.Context(), a.Key, bytes.Repeat([]byte("b"), int(a.Size))); err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), "GET", b.url+"/v1/jobs/dig-1/artifacts/big.bin", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+b.alice)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, rerr := io.ReadAll(resp.Body)
	sum := sha256.Sum256(data)
	if rerr == nil || int64(len(data)) >= a.Size {
		t.Errorf("a corrupt artifact: %s, %d of %d bytes, read error %v, sha256 %s (the result lists %s)",
			resp.Status, len(data), a.Size, rerr, hex.EncodeToString(sum[:]), a.SHA256)
	}
}
