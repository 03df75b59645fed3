package wcring

import (
	"errors"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// TestOrderAcrossGrowth pushes more than Initial completions with some
// popped in between, so that the ring wraps and then grows, and checks
// that they come out whole and in order.
func TestOrderAcrossGrowth(t *testing.T) {
	r := New(4 * Initial)
	next, want := uint64(0), uint64(0)
	buf := make([]verbs.WC, 7)
	for round := range 600 {
		for range 5 + round%3 {
			r.Push(verbs.WC{ID: next})
			next++
		}
		for _, wc := range buf[:r.Pop(buf[:3])] {
			if wc.ID != want {
				t.Fatalf("popped %d, want %d", wc.ID, want)
			}
			want++
		}
	}
	for r.Len() > 0 {
		for _, wc := range buf[:r.Pop(buf)] {
			if wc.ID != want {
				t.Fatalf("popped %d, want %d", wc.ID, want)
			}
			want++
		}
	}
	if want != next || r.Err() != nil {
		t.Fatalf("popped %d of %d, Err %v", want, next, r.Err())
	}
}

// TestOverrun fills a ring to its depth: the next completion is dropped
// and Err reports ErrQueueFull from then on; what was in the ring stays.
func TestOverrun(t *testing.T) {
	r := New(3)
	for i := range 4 {
		r.Push(verbs.WC{ID: uint64(i)})
	}
	if !errors.Is(r.Err(), verbs.ErrQueueFull) {
		t.Fatalf("Err after overrun: %v", r.Err())
	}
	buf := make([]verbs.WC, 8)
	n := r.Pop(buf)
	if n != 3 || buf[0].ID != 0 || buf[2].ID != 2 {
		t.Fatalf("popped %d: %v", n, buf[:n])
	}
	if !errors.Is(r.Err(), verbs.ErrQueueFull) {
		t.Fatalf("Err after draining: %v", r.Err())
	}
}

// TestGrowsOnlyWhenFull checks that a deep ring starts at Initial entries
// and that a shallow one starts at its depth.
func TestGrowsOnlyWhenFull(t *testing.T) {
	if r := New(1 << 20); len(r.buf) != Initial {
		t.Fatalf("deep ring starts with %d entries", len(r.buf))
	}
	if r := New(5); len(r.buf) != 5 {
		t.Fatalf("shallow ring starts with %d entries", len(r.buf))
	}
	r := New(1 << 20)
	for i := range Initial + 1 {
		r.Push(verbs.WC{ID: uint64(i)})
	}
	if len(r.buf) != 2*Initial || r.Err() != nil {
		t.Fatalf("after %d pushes: %d entries, Err %v", Initial+1, len(r.buf), r.Err())
	}
}
