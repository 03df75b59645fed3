package recvq

import "testing"

// TestQueueOrderAndWrap: receives come out in the order posted, across
// the end of the ring, and a taken slot keeps no segment.
func TestQueueOrderAndWrap(t *testing.T) {
	q := New(3)
	next, want := uint64(1), uint64(1)
	buf := []byte("abcdefgh")
	for round := range 5 {
		for !q.Full() {
			e := Entry{ID: next, NSeg: 1}
			e.Seg[0] = buf[next%8:]
			q.Push(&e)
			next++
		}
		if q.Len() != 3 {
			t.Fatalf("round %d: %d posted, want 3", round, q.Len())
		}
		if h := q.Head(); h.ID != want || &h.Seg[0][0] != &buf[want%8] {
			t.Fatalf("round %d: head %d, want %d", round, h.ID, want)
		}
		q.Drop()
		want++
		if e := q.Pop(); e.ID != want || e.NSeg != 1 {
			t.Fatalf("round %d: popped %d, want %d", round, e.ID, want)
		}
		want++
	}
	for _, e := range q.ents {
		if e.ID < want && e.Seg[0] != nil {
			t.Fatalf("a taken slot (request %d) still holds its segment", e.ID)
		}
	}
	if q := New(0); q.Full() || q.Len() != 0 {
		t.Fatal("a queue of depth 0 holds one receive")
	}
}
