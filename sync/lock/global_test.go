package lock

import "testing"

// TestGlobalFields: the Global word's fields do not overlap, and every
// count can reach maxClass without spilling into its neighbour.
func TestGlobalFields(t *testing.T) {
	var seen uint64
	for _, f := range []struct {
		name  string
		shift uint
		mask  uint64
	}{
		{"all holders", classAll.hold, fieldMask}, {"all waiters", classAll.wait, fieldMask},
		{"excl holders", classExcl.hold, fieldMask}, {"excl waiters", classExcl.wait, fieldMask},
		{"all generation", classAll.gen, genMask}, {"excl generation", classExcl.gen, genMask},
		{"turn", 62, 1},
	} {
		m := f.mask << f.shift
		if m>>f.shift != f.mask {
			t.Errorf("%s: field runs off the word", f.name)
		}
		if seen&m != 0 {
			t.Errorf("%s overlaps another field", f.name)
		}
		seen |= m
	}
	for _, c := range []class{classAll, classExcl} {
		s := uint64(maxClass) * c.one()
		if c.holders(s) != maxClass || c.waiters(s) != 0 || c.other().holders(s) != 0 {
			t.Errorf("class %v: %d holders read back as %d (word %#x)", c, maxClass, c.holders(s), s)
		}
	}
}

// TestGlobalTransitions walks the Global word through arrivals, waits,
// conversions and releases and checks every decision.
func TestGlobalTransitions(t *testing.T) {
	a, x := classAll, classExcl
	var s uint64
	// Two lock_all arrivals: admitted.
	for range 2 {
		if !a.admits(s) {
			t.Fatalf("lock_all arrival refused on %#x", s)
		}
		s += a.one()
	}
	// An exclusive arrival is refused and waits.
	if x.admits(s) {
		t.Fatal("exclusive arrival admitted while lock_all is held")
	}
	s += x.one() + x.toWait()
	if x.holders(s) != 0 || x.waiters(s) != 1 {
		t.Fatalf("exclusive waiter: %#x", s)
	}
	if x.canConvert(s) {
		t.Fatal("exclusive waiters may convert while lock_all is held")
	}
	// A third lock_all arrival now waits behind the exclusive waiter.
	if a.admits(s) {
		t.Fatal("lock_all arrival admitted ahead of an exclusive waiter")
	}
	s += a.one() + a.toWait()
	if a.canConvert(s) {
		t.Fatal("lock_all waiter joins the running phase ahead of an exclusive waiter")
	}
	// Both holders leave: a tie. The turn (clear) is lock_all's: its
	// waiter converts, and the conversion hands the turn over.
	s += 2 * a.minusOne()
	if !a.canConvert(s) || x.canConvert(s) {
		t.Fatalf("tie on %#x: lock_all has the turn", s)
	}
	g := a.generation(s)
	s = a.convert(s)
	if a.holders(s) != 1 || a.waiters(s) != 0 || a.generation(s) != (g+1)&genMask || !x.hasTurn(s) {
		t.Fatalf("after converting the lock_all waiter: %#x", s)
	}
	// A fourth lock_all arrival waits (an exclusive locker waits).
	if a.admits(s) {
		t.Fatal("lock_all arrival admitted ahead of an exclusive waiter")
	}
	s += a.one() + a.toWait()
	// The holder leaves: a tie again, now the exclusive side's.
	s += a.minusOne()
	if a.canConvert(s) || !x.canConvert(s) {
		t.Fatalf("second tie on %#x: the exclusive side has the turn", s)
	}
	g = x.generation(s)
	s = x.convert(s)
	if x.holders(s) != 1 || x.waiters(s) != 0 || x.generation(s) != (g+1)&genMask || !a.hasTurn(s) {
		t.Fatalf("after converting the exclusive waiter: %#x", s)
	}
	if a.canConvert(s) {
		t.Fatal("lock_all may convert while an exclusive lock is held")
	}
	// The exclusive holder leaves: the lock_all waiter converts.
	s += x.minusOne()
	if !a.canConvert(s) {
		t.Fatalf("lock_all waiter cannot convert on %#x", s)
	}
	s = a.convert(s)
	s += a.minusOne()
	if s&^(genMask<<a.gen|genMask<<x.gen|turnBit) != 0 {
		t.Fatalf("counts left at the end: %#x", s)
	}
	// Generations wrap within their field.
	for range 2 * (genMask + 1) {
		s = x.convert(s + x.one() + x.toWait())
		s += x.minusOne()
	}
	if a.generation(s) != 2 || s&^(genMask<<a.gen|genMask<<x.gen|turnBit) != 0 {
		t.Fatalf("after wrapping the exclusive generation: %#x", s)
	}
}
