package sessionhost

import (
	"fmt"
	"testing"
)

// An owner chooses the idempotency keys and how large each answer is (a
// read's data, an exec's output, up to maxCachedAnswer): what a session
// keeps for retries stays within 8 MiB (maxCachedBytes), however many keys and
// bytes come, and a retry of the last call still gets its answer.
func TestAnswerCacheIsBounded(t *testing.T) {
	c := newAnswerCache(64)
	big := make([]byte, maxCachedAnswer-1)
	var last string
	for i := range 200 {
		last = fmt.Sprintf("exec key-%d", i)
		a, first := c.claim(last)
		if !first {
			t.Fatalf("%s: claimed twice", last)
		}
		c.finish(last, a, big)
	}
	kept := 0
	for _, a := range c.m {
		kept += len(a.data)
	}
	if kept > 8<<20 {
		t.Fatalf("the cache keeps %d MiB of answers, want at most 8", kept>>20)
	}
	a, first := c.claim(last)
	if first || len(a.data) != len(big) {
		t.Fatalf("the last call's retry: first %v, %d bytes of answer", first, len(a.data))
	}
}

// A call still running when its key is forgotten gives its retries, which
// wait on its claim, its answer: they must not run it again.
func TestAnswerCacheEvictedWhileRunning(t *testing.T) {
	c := newAnswerCache(2)
	a, _ := c.claim("exec slow")
	retry, first := c.claim("exec slow")
	if first || retry != a {
		t.Fatal("the retry did not wait on the first call's claim")
	}
	for i := range 4 {
		k := fmt.Sprintf("exec other-%d", i)
		b, _ := c.claim(k)
		c.finish(k, b, []byte("x"))
	}
	c.finish("exec slow", a, []byte("answer"))
	<-retry.done
	if string(retry.data) != "answer" {
		t.Fatalf("the retry got %q, want the first call's answer", retry.data)
	}
}
