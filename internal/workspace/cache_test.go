package workspace

import (
	"bytes"
	"testing"
)

func TestSnapCache(t *testing.T) {
	c := NewCache(10)
	a := CacheKey{"", "ws", 1, "aa"}
	data := []byte("12345")
	c.Put(a, data)
	data[0] = 'x' // the cache holds its own copy
	if got := c.Get(a); !bytes.Equal(got, []byte("12345")) {
		t.Fatalf("get = %q", got)
	}
	// The same revision with another digest (the workspace removed and
	// made again) is another snapshot.
	if got := c.Get(CacheKey{"", "ws", 1, "bb"}); got != nil {
		t.Fatalf("another digest: %q", got)
	}
	if got := c.Get(CacheKey{"t", "ws", 1, "aa"}); got != nil {
		t.Fatalf("another tenant: %q", got)
	}
	b := CacheKey{"", "ws", 2, "cc"}
	c.Put(b, []byte("abcd"))
	c.Get(a) // a is now the most recent: b goes first
	c.Put(CacheKey{"", "ws", 3, "dd"}, []byte("xyz"))
	if c.Get(b) != nil || c.Get(a) == nil {
		t.Fatalf("evicted the wrong entry: size %d", c.size)
	}
	if c.size > c.max {
		t.Fatalf("size %d over %d", c.size, c.max)
	}
	c.Put(CacheKey{"", "big", 1, "ee"}, make([]byte, 11))
	if c.Get(CacheKey{"", "big", 1, "ee"}) != nil || c.Get(a) == nil {
		t.Fatal("an entry over the bound was kept, or evicted the rest")
	}
	c.Put(CacheKey{"", "ws", 9, ""}, []byte("1"))
	if c.Get(CacheKey{"", "ws", 9, ""}) != nil {
		t.Fatal("kept an entry without a digest")
	}
}
