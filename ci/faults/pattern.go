package faults

import "fmt"

// The window of every rank is a Layout: two buffers (epochs alternate
// between them, so that the previous epoch's data stays whole while the next
// one is written), each with one slot per origin rank, each slot K data
// words followed by Guard words that no rank ever writes.
//
// Every data word says who wrote it, for whom, in which epoch and where:
// origin (8 bits) | target (8 bits) | epoch (24 bits) | index (24 bits).
// A word that does not decode to its own slot and place is corrupt; a word
// of the wrong epoch is a lost or misplaced write. Epochs 0 and 1 are the
// initial contents of buffers 0 and 1; the ranks' epochs start at 2.
//
// After the buffers come N counters, one per origin: in every epoch each
// origin adds 1 to its counter at every target with a remote fetch-and-add
// (the atomic path), so the old value it gets back is the number of its
// earlier epochs, exactly.
type Layout struct {
	N int // ranks
	K int // data words per slot
}

// Guard is the number of guard words after each slot.
const Guard = 4

// FirstEpoch is the first epoch the ranks run.
const FirstEpoch = 2

// guardEpoch is the epoch field of guard words (no epoch reaches it).
const guardEpoch = 1<<24 - 1

// Limits of the encoding.
const (
	MaxRanks  = 256
	MaxK      = 1 << 24
	MaxEpochs = guardEpoch - FirstEpoch
)

// Len is the window's length in words.
func (l Layout) Len() int { return 2*l.N*(l.K+Guard) + l.N }

// Counter is the offset, in words, of origin's counter.
func (l Layout) Counter(origin int) int { return 2*l.N*(l.K+Guard) + origin }

// Count is the value of an origin's counter at a target once the origin's
// epochs up to e have been counted there (before the first: 0).
func Count(e int) uint64 { return uint64(max(e-FirstEpoch+1, 0)) }

// Slot is the offset, in words, of origin's slot in buffer b (0 or 1).
func (l Layout) Slot(b, origin int) int { return (b*l.N + origin) * (l.K + Guard) }

// Buffer is the buffer epoch e writes.
func Buffer(e int) int { return e & 1 }

// Value is the word origin writes at index i of its slot at target in
// epoch e.
func Value(origin, target, e, i int) uint64 {
	return uint64(origin&0xff)<<56 | uint64(target&0xff)<<48 | uint64(e&0xffffff)<<24 | uint64(i&0xffffff)
}

// guardValue is guard word i after origin's slot at target.
func guardValue(origin, target, i int) uint64 { return Value(origin, target, guardEpoch, i) }

// Fill sets dst to the data origin writes to target in epoch e.
func Fill(dst []uint64, origin, target, e int) {
	for i := range dst {
		dst[i] = Value(origin, target, e, i)
	}
}

// Init sets rank me's window to its initial contents: epoch 0 in buffer 0,
// epoch 1 in buffer 1, and the guards.
func (l Layout) Init(win []uint64, me int) {
	for b := range 2 {
		for o := range l.N {
			s := l.Slot(b, o)
			Fill(win[s:s+l.K], o, me, b)
			for i := range Guard {
				win[s+l.K+i] = guardValue(o, me, i)
			}
		}
	}
	for o := range l.N {
		win[l.Counter(o)] = 0
	}
}

// Check is the result of verifying data: bytes checked, bytes wrong, and a
// description of the first wrong word.
type Check struct {
	Checked, Corrupt int64
	First            string
}

// Add merges c2 into c.
func (c *Check) Add(c2 Check) {
	c.Checked += c2.Checked
	c.Corrupt += c2.Corrupt
	if c.First == "" {
		c.First = c2.First
	}
}

// Word compares one word with what it should be; where describes it.
func (c *Check) Word(got, want uint64, where string) {
	c.word(got, want, func() string { return where })
}

// word compares one word with what it should be.
func (c *Check) word(got, want uint64, where func() string) {
	c.Checked += 8
	if got == want {
		return
	}
	n := int64(0)
	for x := got ^ want; x != 0; x >>= 8 {
		if x&0xff != 0 {
			n++
		}
	}
	c.Corrupt += n
	if c.First == "" {
		c.First = fmt.Sprintf("%s: got %#016x, want %#016x", where(), got, want)
	}
}

// Exact checks that data (a slot's data words, or what was read back from
// one) is exactly what origin wrote to target in epoch e.
func Exact(data []uint64, origin, target, e int, what string) Check {
	var c Check
	for i, v := range data {
		c.word(v, Value(origin, target, e, i), func() string {
			return fmt.Sprintf("%s: origin %d's word %d of epoch %d", what, origin, i, e)
		})
	}
	return c
}

// ExactEpoch checks rank me's buffer of epoch e: every slot of an origin in
// from holds exactly epoch e's data, every guard is intact, and every
// counter has counted epoch e (and no more than the next: a peer may be in
// it already).
func (l Layout) ExactEpoch(win []uint64, me, e int, from []int) Check {
	var c Check
	for _, o := range from {
		s := l.Slot(Buffer(e), o)
		c.Add(Exact(win[s:s+l.K], o, me, e, "window"))
	}
	c.Add(l.guards(win, me))
	c.Add(l.counters(win, e, e+1))
	return c
}

// ExactFinal checks rank me's whole window after a job that ran epochs
// FirstEpoch..last without a fault: each buffer holds the last epoch that
// wrote it, from every origin, and every counter counted every epoch.
func (l Layout) ExactFinal(win []uint64, me, last int) Check {
	var c Check
	for e := max(last-1, 0); e <= last; e++ {
		for o := range l.N {
			s := l.Slot(Buffer(e), o)
			c.Add(Exact(win[s:s+l.K], o, me, e, "final window"))
		}
	}
	c.Add(l.guards(win, me))
	c.Add(l.counters(win, last, last))
	return c
}

// counters checks that every origin's counter has counted its epochs up to
// lo at least, and up to hi at most.
func (l Layout) counters(win []uint64, lo, hi int) Check {
	var c Check
	for o := range l.N {
		v, want := win[l.Counter(o)], Count(lo)
		if v > want && v <= Count(hi) {
			want = v
		}
		c.word(v, want, func() string {
			return fmt.Sprintf("origin %d's counter (epochs %d to %d)", o, lo, hi)
		})
	}
	return c
}

func (l Layout) guards(win []uint64, me int) Check {
	var c Check
	for b := range 2 {
		for o := range l.N {
			s := l.Slot(b, o) + l.K
			for i := range Guard {
				c.word(win[s+i], guardValue(o, me, i), func() string {
					return fmt.Sprintf("guard %d after origin %d's slot of buffer %d", i, o, b)
				})
			}
		}
	}
	return c
}

// AfterFault checks rank me's window after a fault of rank faulty (-1:
// none known), when some epoch may have been cut short. For every origin,
// the buffer of its older epoch was written by an epoch that completed, so
// it must hold that epoch's data exactly (for the faulty rank too: what it
// wrote before the fault must be intact); the other buffer may be in the
// middle of being overwritten, so each word must be that buffer's newest
// epoch or the one before, except from the faulty rank, whose last write
// may have been cut anywhere, even inside a word (those words are not
// checked). completed is the last epoch this rank knows complete at its
// window (its last Fence or Wait that returned; -1 in the passive-target
// modes): every origin's data of that epoch arrived, so no origin's newest
// epoch may be older (a lost epoch). Every guard must be intact.
//
// (Stronger rules do not hold: a peer may be an epoch ahead of this rank,
// writing the buffer of this rank's completed epoch already, and a faulty
// rank that was ahead may have been cut inside a word there.)
func (l Layout) AfterFault(win []uint64, me, faulty, completed int) Check {
	var c Check
	for o := range l.N {
		var newest [2]int
		for b := range 2 {
			newest[b] = -1
			s := l.Slot(b, o)
			for i, v := range win[s : s+l.K] {
				if e, ok := decode(v, o, me, i); ok && e&1 == b && e > newest[b] {
					newest[b] = e
				}
			}
		}
		if completed >= FirstEpoch && max(newest[0], newest[1]) < completed {
			s := l.Slot(Buffer(completed), o)
			c.Add(Exact(win[s:s+l.K], o, me, completed, "completed epoch lost"))
			continue
		}
		older, newer := 0, 1
		if newest[0] > newest[1] {
			older, newer = 1, 0
		}
		eo := max(newest[older], older) // nothing valid: compare with the initial contents
		s := l.Slot(older, o)
		c.Add(Exact(win[s:s+l.K], o, me, eo, "completed epoch"))
		if o == faulty {
			continue
		}
		en := max(newest[newer], newer)
		s = l.Slot(newer, o)
		for i, v := range win[s : s+l.K] {
			want := Value(o, me, en, i)
			if v == Value(o, me, en-2, i) && en-2 >= 0 {
				want = v
			}
			c.word(v, want, func() string {
				return fmt.Sprintf("latest epoch: origin %d's word %d (epoch %d or %d)", o, i, en-2, en)
			})
		}
	}
	c.Add(l.guards(win, me))
	if completed >= FirstEpoch {
		// Every origin's increments up to the completed epoch arrived; a
		// live one may be a little ahead (its epochs are bounded only by
		// the encoding), the faulty one too.
		c.Add(l.counters(win, completed, MaxEpochs))
	}
	return c
}

// decode returns the epoch of word v if it is origin's word i at target.
func decode(v uint64, origin, target, i int) (int, bool) {
	e := int(v >> 24 & 0xffffff)
	return e, v&^(0xffffff<<24) == Value(origin, target, 0, i) && e != guardEpoch
}
