package batch

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"regexp"
)

var badNameChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// CleanName turns s into a batch name usable in job IDs.
func CleanName(s string) string {
	s = badNameChars.ReplaceAllString(s, "-")
	if len(s) > 64 {
		s = s[:64]
	}
	return s
}

// DeriveID is the ID of a line without one: name, then 24 hex digits of
// the SHA-256 of the name, the line's canonical JSON (a jobs.Job as
// json.Marshal writes it) and k, the number of earlier lines of the batch
// with the same canonical JSON.
func DeriveID(name string, canonical []byte, k uint32) string {
	h := sha256.New()
	h.Write([]byte(name))
	h.Write([]byte{0})
	h.Write(canonical)
	var kb [4]byte
	binary.BigEndian.PutUint32(kb[:], k)
	h.Write(kb[:])
	return name + "-" + hex.EncodeToString(h.Sum(nil)[:12])
}

// lineIDs gives one pass over a batch's input its lines' IDs: it derives
// the ID of a line without one and finds two lines with the same ID. Per
// line it keeps 8 bytes of hashes, never the line.
type lineIDs struct {
	name string
	occ  map[[8]byte]uint32 // content hash → lines seen with it
	seen map[[8]byte]int    // ID hash → first line
}

func newLineIDs(name string) *lineIDs {
	return &lineIDs{name: name, occ: map[[8]byte]uint32{}, seen: map[[8]byte]int{}}
}

// derive returns the ID of the next line of this canonical JSON without
// an ID of its own (DeriveID).
func (l *lineIDs) derive(canonical []byte) string {
	cs := sha256.Sum256(canonical)
	key := [8]byte(cs[:8])
	k := l.occ[key]
	l.occ[key]++
	return DeriveID(l.name, canonical, k)
}

// claim records id as line n's. When an earlier line has it, claim
// returns that line and false.
func (l *lineIDs) claim(id string, n int) (first int, ok bool) {
	sum := sha256.Sum256([]byte(id))
	key := [8]byte(sum[:8])
	if first, dup := l.seen[key]; dup {
		return first, false
	}
	l.seen[key] = n
	return n, true
}
