package keytab

import (
	"errors"
	"testing"

	"github.com/rmago/rmago/verbs"
)

func TestAddLookupRemove(t *testing.T) {
	var tab Table[int]
	a, b := new(int), new(int)
	ka, err := tab.Add(a, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	var published uint32
	kb, err := tab.Add(b, nil, func(k uint32) { published = k })
	if err != nil {
		t.Fatal(err)
	}
	if Index(ka) != 1 || Index(kb) != 2 || published != kb {
		t.Fatalf("keys %#x %#x published %#x: want indexes 1, 2 and the second key published", ka, kb, published)
	}
	if tab.Lookup(ka) != a || tab.Lookup(kb) != b {
		t.Fatal("Lookup does not find what Add stored")
	}
	if tab.Lookup(ka^0x10000) != nil || tab.Lookup(0) != nil || tab.Lookup(7) != nil {
		t.Fatal("Lookup finds a stale, zero or unknown key")
	}
	tab.Remove(ka)
	if tab.Lookup(ka) != nil || tab.Lookup(kb) != b {
		t.Fatal("Remove took the wrong slot")
	}
	// A free index is reused only when reusable says so.
	c := new(int)
	kc, err := tab.Add(c, func(uint32) bool { return false }, nil)
	if err != nil || Index(kc) != 3 {
		t.Fatalf("key %#x, %v: want index 3", kc, err)
	}
	d := new(int)
	kd, err := tab.Add(d, nil, nil)
	if err != nil || Index(kd) != 1 || tab.Lookup(kd) != d {
		t.Fatalf("key %#x, %v: want index 1 reused", kd, err)
	}
}

func TestFull(t *testing.T) {
	var tab Table[int]
	v := new(int)
	if _, err := tab.Add(v, nil, nil); err != nil {
		t.Fatal(err)
	}
	// Fill the rest directly: Slots-2 more Adds copy the table each time.
	full := make([]slot[int], Slots)
	copy(full, *tab.slots.Load())
	for i := 2; i < Slots; i++ {
		full[i] = slot[int]{key: uint32(i), v: v}
	}
	tab.slots.Store(&full)
	if _, err := tab.Add(v, nil, nil); !errors.Is(err, verbs.ErrInvalid) {
		t.Fatalf("Add past %d: %v, want ErrInvalid", Slots-1, err)
	}
	tab.Remove(5)
	if k, err := tab.Add(v, nil, nil); err != nil || Index(k) != 5 {
		t.Fatalf("key %#x, %v: want index 5 reused in a full table", k, err)
	}
}

func TestLookupAllocates0(t *testing.T) {
	var tab Table[int]
	k, _ := tab.Add(new(int), nil, nil)
	if n := testing.AllocsPerRun(100, func() { tab.Lookup(k) }); n != 0 {
		t.Fatalf("Lookup allocates %v times, want 0", n)
	}
}

// TestReuseNeverRepeats: an index freed and taken again gets the next
// generation, so a key never comes back as the key freed just before it
// (a peer's cached mapping of the old region would then reach the new
// key), through a full cycle of the 16-bit generation; the stale key
// misses.
func TestReuseNeverRepeats(t *testing.T) {
	var tab Table[int]
	v := new(int)
	prev, err := tab.Add(v, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	first := prev
	for i := range 1 << 16 {
		tab.Remove(prev)
		k, err := tab.Add(v, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		if Index(k) != Index(prev) || k == prev {
			t.Fatalf("reuse %d: key %#x after %#x: want the same index, another key", i, k, prev)
		}
		if k>>16 != (prev>>16+1)&0xffff {
			t.Fatalf("reuse %d: generation %#x after %#x, want the next", i, k>>16, prev>>16)
		}
		if tab.Lookup(prev) != nil || tab.Lookup(k) != v {
			t.Fatalf("reuse %d: the stale key %#x is found, or the new one %#x is not", i, prev, k)
		}
		prev = k
	}
	if prev != first {
		t.Fatalf("after 65536 reuses the key is %#x, want the first again (%#x): the generation wraps", prev, first)
	}
}
