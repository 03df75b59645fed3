package fence

import (
	"cmp"
	"math/bits"
)

// A gathered round one (3 to DisseminationMin-1 ranks, SyncTo on a fence
// with control words, no rank notified directly). All-to-all, every rank
// sends every other a notification and waits for one from each: size-1
// messages a rank, and on a node with more ranks than cores each one may
// wake a rank that has nothing to do with it (one-to-many: the peers'
// notes to each other). Gathered, the notes go only where they carry
// something:
//
//   - each rank writes its masks (the ranks it will notify, the ranks it
//     put into) into the root's control word, then notifies the root;
//   - it notifies each rank it put into (or read from), behind those
//     requests on the queue pair;
//   - the root, once it has every rank's masks, writes to each rank the
//     put masks of all and the set of ranks that notify it, then notifies
//     it, behind its own requests to it;
//   - a rank leaves once it has the root's note and a note from each rank
//     the root named.
//
// Messages a fence: 2(size-1) plus one per pair that put, against
// size(size-1); dependent hops: two (to the root and back) instead of one.
// Every rank notifies the root only after its reads and atomics have
// completed, and no rank leaves before the root has heard from all, so
// the reads complete before any rank leaves.

// gatherRoot is the rank that gathers the masks.
const gatherRoot = 0

// gatherBit tags the root's note of a gathered round one (a caller bit
// no dissemination step reaches: DisseminationMin is far below 2^9).
const gatherBit = 1 << 11

// Layout of the words. A rank's word to the root: bits 0-7 the ranks it
// notifies (besides the root), 8-15 the ranks it put into. The root's word
// to rank j: bits 8s..8s+7 rank s's put mask, 56-63 the ranks that notify
// j (besides the root).
const (
	rowBits  = 8
	intoBits = 56
)

// gatherOK says whether this fence's round one is gathered.
func (x *Fence) gatherOK() bool {
	return x.f.GatherFences() && x.f.Size() < rowBits
}

// gathered is round one, gathered at the root; it reports whether any rank
// put and leaves every rank's put mask in rows for round two.
func (x *Fence) gathered(base uint32, putTo []bool, first []int, rows []uint64) (bool, error) {
	f, me := x.f, x.f.Rank()
	var puts uint64
	for r, p := range putTo {
		if p && r != me {
			puts |= 1 << r
		}
	}
	if me == gatherRoot {
		return x.gatherAtRoot(base, puts, first, rows)
	}
	notes := puts
	for _, r := range first {
		notes |= 1 << r
	}
	notes &^= 1 << gatherRoot
	w := maskWord(me, x.n)
	x.c.Store(w, notes|puts<<rowBits)
	if _, err := f.Write(gatherRoot, x.c.LocalAt(w), x.c.RemoteAt(gatherRoot, w), 8); err != nil {
		return false, err
	}
	tagTo := func(r int) uint32 {
		if puts>>r&1 != 0 {
			return base | putBit
		}
		return base
	}
	// The notes to the ranks read from, signalled: their completion is the
	// reads' (as barrier's first).
	// A rank this rank cannot reach (it failed or left) does not stop it
	// before its other notes: the ranks waiting for them would wait out
	// the timeout and name this rank. The fence's error is the first.
	var ferr error
	rootDone := false
	for _, r := range first {
		if _, err := f.NotifySignaled(r, tagTo(r)); err != nil {
			ferr = cmp.Or(ferr, err)
		}
		rootDone = rootDone || r == gatherRoot
	}
	ferr = cmp.Or(ferr, f.FlushRanks(first))
	if !rootDone {
		ferr = cmp.Or(ferr, f.Notify(gatherRoot, tagTo(gatherRoot)))
	}
	for m := notes; m != 0; m &= m - 1 {
		r := bits.TrailingZeros64(m)
		if !x.inFirst(r, first) {
			ferr = cmp.Or(ferr, f.Notify(r, tagTo(r)))
		}
	}
	x.from = gatherRoot
	if err := f.AwaitNotesGrace(base|gatherBit, 1, x.fromFn, f.NoticeGrace()); err != nil {
		return false, cmp.Or(ferr, err)
	}
	f.SyncMemory()
	m := x.c.Load(maskWord(gatherRoot, x.n))
	x.nranks = x.nranks[:0]
	for into := m >> intoBits; into != 0; into &= into - 1 {
		x.nranks = append(x.nranks, bits.TrailingZeros64(into))
	}
	if len(x.nranks) > 0 {
		if _, err := f.AwaitNotesEitherFrom(base, base|putBit, len(x.nranks), x.nranksFn); err != nil {
			return false, cmp.Or(ferr, err)
		}
	}
	for s := range rows {
		rows[s] = m >> (rowBits * s) & (1<<rowBits - 1)
	}
	return m&(1<<intoBits-1) != 0, ferr
}

// gatherAtRoot is gathered at the root: its reads and atomics completed,
// it waits for every rank's masks and sends each rank its word.
func (x *Fence) gatherAtRoot(base uint32, puts uint64, first []int, rows []uint64) (bool, error) {
	f, n := x.f, x.f.Size()
	ferr := f.FlushRanks(first) // as in gathered: the others still get their words
	if _, err := f.AwaitNotesEitherGrace(base, base|putBit, n-1, x.othersFnOnce(), f.NoticeGrace()/2); err != nil {
		return false, cmp.Or(ferr, err)
	}
	f.SyncMemory()
	var matrix uint64
	var into [rowBits]uint64
	rows[gatherRoot] = puts
	matrix = puts
	for s := 1; s < n; s++ {
		v := x.c.Load(maskWord(s, x.n))
		rows[s] = v >> rowBits & (1<<rowBits - 1)
		matrix |= rows[s] << (rowBits * s)
		for m := v & (1<<rowBits - 1); m != 0; m &= m - 1 {
			into[bits.TrailingZeros64(m)] |= 1 << s
		}
	}
	for j := 1; j < n; j++ {
		// From j's own word: j writes it again only after this fence's
		// next, which needs this note, and the note follows this write.
		w := maskWord(j, x.n)
		x.c.Store(w, matrix|into[j]<<intoBits)
		// A rank that cannot be reached does not keep the others from
		// their words.
		if _, err := f.Write(j, x.c.LocalAt(w), x.c.RemoteAt(j, maskWord(gatherRoot, x.n)), 8); err != nil {
			ferr = cmp.Or(ferr, err)
			continue
		}
		if err := f.Notify(j, base|gatherBit); err != nil {
			ferr = cmp.Or(ferr, err)
		}
	}
	return matrix != 0, ferr
}

func (x *Fence) inFirst(r int, first []int) bool {
	for _, s := range first {
		if s == r {
			return true
		}
	}
	return false
}

// othersFnOnce yields every other rank.
func (x *Fence) othersFnOnce() func(yield func(int) bool) {
	if x.othersFn == nil {
		x.othersFn = func(yield func(int) bool) {
			for _, r := range x.othersList() {
				if !yield(r) {
					return
				}
			}
		}
	}
	return x.othersFn
}
