package faults

import (
	"errors"
	"fmt"
	"slices"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/transport"
	"github.com/rmago/rmago/verbs"
)

func TestClassify(t *testing.T) {
	for _, c := range []struct {
		err  error
		want Class
	}{
		{nil, ClassNone},
		{fmt.Errorf("epoch 3: Fence: %w", fmt.Errorf("%w: rank 2: %w", transport.ErrPeer, verbs.ErrTransport)), ClassPeer},
		// A peer failure that wraps a verbs timeout is a peer failure.
		{fmt.Errorf("%w: rank 1: %w", transport.ErrPeer, verbs.ErrTimeout), ClassPeer},
		{fmt.Errorf("Lock: %w after 3s", transport.ErrTimeout), ClassTimeout},
		{fmt.Errorf("x: %w", verbs.ErrFlushed), ClassPeer},
		{rma.ErrClosed, ClassClosed},
		{fmt.Errorf("%w: rank 9 of 4", rma.ErrRank), ClassUsage},
		{fmt.Errorf("%w: bad env", transport.ErrBootstrap), ClassBootstrap},
		{verbs.ErrRemoteAccess, ClassAccess},
		{errors.New("something else"), ClassOther},
	} {
		if got := Classify(c.err); got != c.want {
			t.Errorf("Classify(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if !RightClass(Kill9, ClassPeer) || RightClass(Kill9, ClassTimeout) || !RightClass(Stop, ClassTimeout) || RightClass(Pause, ClassPeer) {
		t.Error("RightClass disagrees with Expected")
	}
}

func TestNamedRanks(t *testing.T) {
	for _, c := range []struct {
		msg  string
		want []int
	}{
		{"transport: peer failed: rank 3: verbs: transport error", []int{3}},
		{"epoch 4: lock: exclusive lock on rank 1: rank 2 failed while the lock was busy", []int{1, 2}},
		{"timed out (1 of 3 ranks did not post, rank 0 among them)", []int{0}},
		{"waiting for ranks 1, 3 and 4", []int{1, 3, 4}},
		{"ranks [5 6] did not answer; Rank 5 again", []int{5, 6}},
		{"3 of 4 notifications arrived; none from rank(s) [0 2] within 1s", []int{0, 2}},
		{"pscw: wait: timed out (2 of 4 completions arrived: none from ranks [3 4])", []int{3, 4}},
		{"lock on rank 3 timed out: held exclusively by rank 2", []int{3, 2}},
		{"rank 12 of 16", []int{12}},
		{"transport: timed out waiting for peers (deadline 00:26:50.697 passed; RMAGO_TIMEOUT is 3s)", nil},
		{"frank 3 cranks 4", nil},
		{"rank", nil},
	} {
		if got := NamedRanks(c.msg); !slices.Equal(got, c.want) {
			t.Errorf("NamedRanks(%q) = %v, want %v", c.msg, got, c.want)
		}
	}
}

func TestEventLine(t *testing.T) {
	e := Event{Kind: EvError, Rank: 3, Time: 1234567890123, Epoch: 7, Phase: "epoch",
		Err: "x: rank 2", Class: ClassPeer, Names: []int{2}, Checked: 80, Corrupt: 3, First: "w"}
	line := e.Line()
	if line[len(line)-1] != '\n' {
		t.Fatalf("no newline: %q", line)
	}
	got, ok := ParseLine(line[:len(line)-1])
	if !ok || got.Kind != e.Kind || got.Rank != 3 || got.Time != e.Time || got.Err != e.Err || got.Class != e.Class ||
		!slices.Equal(got.Names, e.Names) || got.Checked != 80 || got.Corrupt != 3 || got.First != "w" || got.Epoch != 7 {
		t.Fatalf("round trip: %+v, %v", got, ok)
	}
	for _, other := range []string{"", "hello", Prefix + "{", Prefix + "{}", "x" + string(line)} {
		if _, ok := ParseLine([]byte(other)); ok {
			t.Errorf("ParseLine(%q) accepted", other)
		}
	}
}

// window builds rank me's window as it is after every origin ran epochs
// FirstEpoch..last to completion.
func window(l Layout, me, last int) []uint64 {
	w := make([]uint64, l.Len())
	l.Init(w, me)
	for e := FirstEpoch; e <= last; e++ {
		for o := range l.N {
			s := l.Slot(Buffer(e), o)
			Fill(w[s:s+l.K], o, me, e)
			w[l.Counter(o)]++
		}
	}
	return w
}

func TestExactChecks(t *testing.T) {
	l := Layout{N: 3, K: 16}
	const me, last = 1, 9
	w := window(l, me, last)
	if c := l.ExactFinal(w, me, last); c.Corrupt != 0 || c.Checked != int64((2*l.N*(l.K+Guard)+l.N)*8) {
		t.Fatalf("clean window: %+v", c)
	}
	if c := l.ExactEpoch(w, me, last, []int{0, 1, 2}); c.Corrupt != 0 {
		t.Fatalf("clean epoch: %+v", c)
	}
	// Two bytes of one word wrong: two corrupt bytes, named.
	s := l.Slot(Buffer(last), 2) + 5
	w[s] ^= 0x0000_0100_0000_0001
	c := l.ExactEpoch(w, me, last, []int{0, 1, 2})
	if c.Corrupt != 2 || c.First == "" {
		t.Fatalf("two bytes flipped: %+v", c)
	}
	w[s] ^= 0x0000_0100_0000_0001
	// A guard overwritten (a write past a slot's end) is corrupt.
	g := l.Slot(0, 1) + l.K + 1
	saved := w[g]
	w[g] = 0
	if c := l.ExactFinal(w, me, last); c.Corrupt == 0 {
		t.Fatal("overwritten guard not seen")
	}
	w[g] = saved
	// Counters: after epoch last, each has counted it (and, with a peer
	// in the next epoch already, maybe that one too).
	w[l.Counter(2)]++
	if c := l.ExactEpoch(w, me, last, []int{0, 1, 2}); c.Corrupt != 0 {
		t.Fatalf("a counter one epoch ahead: %+v", c)
	}
	if c := l.ExactFinal(w, me, last); c.Corrupt != 1 {
		t.Fatalf("a counter one too many at the end: %+v", c)
	}
	w[l.Counter(2)] -= 2
	if c := l.ExactEpoch(w, me, last, []int{0, 1, 2}); c.Corrupt != 1 {
		t.Fatalf("a counter one behind: %+v", c)
	}
	w[l.Counter(2)]++
	if Count(FirstEpoch-1) != 0 || Count(FirstEpoch) != 1 || Count(last) != uint64(last-FirstEpoch+1) {
		t.Fatal("Count")
	}
	// Exact compares what was read back.
	back := make([]uint64, l.K)
	Fill(back, me, 2, last)
	if c := Exact(back, me, 2, last, "read back"); c.Corrupt != 0 {
		t.Fatalf("read back: %+v", c)
	}
	back[3]++
	if c := Exact(back, me, 2, last, "read back"); c.Corrupt != 1 {
		t.Fatalf("read back, one byte off: %+v", c)
	}
}

func TestAfterFault(t *testing.T) {
	l := Layout{N: 4, K: 32}
	const me, faulty, last = 0, 2, 8
	clean := func() []uint64 { return window(l, me, last) }
	check := func(name string, w []uint64, completed int, wantCorrupt bool) {
		t.Helper()
		c := l.AfterFault(w, me, faulty, completed)
		if (c.Corrupt != 0) != wantCorrupt {
			t.Errorf("%s (completed %d): %+v", name, completed, c)
		}
	}
	for _, completed := range []int{-1, last} {
		check("complete epochs", clean(), completed, false)

		// A live origin half way through epoch last+1 (it overwrites
		// last-1): words of either epoch are fine.
		w := clean()
		s := l.Slot(Buffer(last+1), 1)
		Fill(w[s:s+l.K/2], 1, me, last+1)
		check("live origin mid-epoch", w, completed, false)

		// A live origin's word torn inside (half of each epoch) is not.
		w[s+l.K/2] = Value(1, me, last+1, l.K/2)&0xffffffff00000000 | Value(1, me, last-1, l.K/2)&0xffffffff
		w[s+l.K/2] ^= 1 << 40
		check("live origin, torn word", w, completed, true)

		// The faulty rank's write cut inside a word, in its newest
		// buffer: not checked.
		w = clean()
		s = l.Slot(Buffer(last+1), faulty)
		Fill(w[s:s+5], faulty, me, last+1)
		w[s+5] = 0xdeadbeef
		check("faulty origin cut mid-word", w, completed, false)

		// But the epoch before must be intact.
		w = clean()
		s = l.Slot(Buffer(last-1), faulty)
		w[s+7] = Value(faulty, me, last-3, 7) // a lost write
		check("faulty origin, older epoch lost a word", w, completed, true)

		// A word from the wrong origin, or for the wrong place, is
		// corrupt.
		w = clean()
		s = l.Slot(Buffer(last), 3)
		w[s+1] = Value(1, me, last, 1)
		check("word of another origin", w, completed, true)
		w = clean()
		w[s+1] = Value(3, me, last, 2)
		check("word of another index", w, completed, true)
		w = clean()
		w[s+1] = Value(3, me+1, last, 1)
		check("word for another target", w, completed, true)

		// Guards are checked after a fault too.
		w = clean()
		w[l.Slot(1, faulty)+l.K] = 0
		check("guard after the faulty rank's slot", w, completed, true)
	}

	// The faulty rank's newest epoch is not checked: it may have been cut.
	w := clean()
	s := l.Slot(Buffer(last), faulty)
	w[s+7] = Value(faulty, me, last-2, 7)
	check("faulty origin, newest epoch lost a word", w, -1, false)
	// A peer an epoch ahead writes the buffer of this rank's completed
	// epoch: fine.
	w = clean()
	s = l.Slot(Buffer(last+2), 3)
	Fill(w[s:s+3], 3, me, last+2)
	s = l.Slot(Buffer(last+1), 3)
	Fill(w[s:s+l.K], 3, me, last+1)
	check("origin an epoch ahead", w, last, false)
	// But an origin whose data of a completed epoch is missing is not.
	w = clean()
	s = l.Slot(Buffer(last), 3)
	Fill(w[s:s+l.K], 3, me, last-2)
	check("origin behind a completed epoch", w, last, true)
	check("origin behind, passive target", w, -1, false)
	// Likewise a counter behind the completed epoch.
	w = clean()
	w[l.Counter(faulty)]--
	check("counter behind a completed epoch", w, last, true)
	check("counter behind, passive target", w, -1, false)

	// A fault before any epoch completed: the initial contents.
	w = make([]uint64, l.Len())
	l.Init(w, me)
	check("initial window", w, -1, false)
	check("initial window", w, FirstEpoch-1, false)
}
