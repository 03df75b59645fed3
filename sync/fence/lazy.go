package fence

import (
	"cmp"
	"sync"
	"sync/atomic"

	"github.com/rmago/rmago/sync/control"
)

// The second round, awaited lazily and only where it is needed (3 to
// DisseminationMin-1 ranks, SyncTo on a fence with control words). Round
// two exists so that no rank reaches a window before every put of the
// epoch has landed in it; after round one a rank knows that of its own
// window only. A rank's own puts to a window are ordered before its later
// accesses by their queue pair: only a third rank's puts need the word.
//
// So before round one each rank writes the set of ranks it put into (its
// put mask) into a control word of every rank, ahead of its round-one
// notification on each queue pair; after round one every rank knows who
// put where. Rank a needs rank t's word that its window is complete iff a
// third rank s (not a, not t) put into t; t sends it right after round
// one, to exactly those ranks, and a waits for it only when it first
// reaches t's window again (Ready: a put, get, accumulate or atomic),
// opens a lock or PSCW access epoch, or starts the next fence (Settle).
// Both sides decide from the same masks, so every note sent is awaited
// and consumed. A fence then costs one round on the way out, and in a
// star (a root putting to every peer, the peers to the root) nobody waits
// for a second round on the way to its next access.
//
// Direct loads and stores into a peer's shared segment (rma's
// SharedSegment) pass no such check: a window whose segments were mapped
// runs round two eagerly (SetEager).

// lazy is the state of a deferred second round.
type lazy struct {
	mu      sync.Mutex
	pending atomic.Uint32 // the round-two tag still to collect notes of; 0: none
	gen     atomic.Uint64 // bumped whenever a new round two is deferred
	eager   atomic.Bool   // SetEager: round two is never deferred
	masks   []uint64      // per rank: its put mask of the running fence
	wait    []bool        // per rank: this rank needs its round-two note (under mu)
	ready   []bool        // per rank: its round-two note taken (under mu)
	missing []int         // scratch for Settle (under mu)
	// missingFn yields missing, for the wait's failure checks (bound once).
	missingFn func(yield func(int) bool)
	num       uint32     // the fence whose round two is pending (under mu)
	dw        directWait // direct notes' waits (direct.go; under mu)
	dmissing  []int      // scratch for Settle: missing ranks notified directly
	one       [1]int     // scratch for Ready
}

// UseControl gives the fence the control region whose words carry the put
// masks, which lets SyncTo defer its second round (see SyncTo). Call it
// before the first fence, on every rank.
func (x *Fence) UseControl(c *control.Region) { x.c = c }

// SetEager makes every later fence of the window await its second round
// before it returns, as a window whose memory peers load and store
// directly needs. Call it on every rank before the same fence, or use
// Settle: each rank decides alone. Safe for concurrent use.
func (x *Fence) SetEager() { x.lz.eager.Store(true) }

// lazyOK says whether this fence may defer its second round.
func (x *Fence) lazyOK() bool {
	n := x.f.Size()
	return x.c != nil && n >= 3 && n < DisseminationMin && n <= control.MaxMaskRanks && !x.lz.eager.Load()
}

// maskWord is the control word holding rank s's put mask of fence n.
func maskWord(s int, n uint32) int { return control.FenceMasks + 2*s + int(n&1) }

// sendMask writes this rank's put mask into every other rank's control
// word, ahead of its round-one notification to each.
func (x *Fence) sendMask(putTo []bool) error {
	f, me := x.f, x.f.Rank()
	var mask uint64
	for r, p := range putTo {
		if p && r != me {
			mask |= 1 << r
		}
	}
	w := maskWord(me, x.n)
	x.c.Store(w, mask)
	var err error
	for i := 1; i < f.Size(); i++ {
		r := (me + i) % f.Size()
		if _, werr := f.Write(r, x.c.LocalAt(w), x.c.RemoteAt(r, w), 8); werr != nil {
			err = cmp.Or(err, werr) // the others still get theirs
		}
	}
	return err
}

// needs reports whether rank a needs rank t's round-two note: a third
// rank put into t.
func (z *lazy) needs(a, t int) bool {
	for s, m := range z.masks {
		if s != a && s != t && m>>t&1 != 0 {
			return true
		}
	}
	return false
}

// defer2 is round two, lazily: after round one (every rank's mask has
// arrived), this rank tells each rank that needs it that its window is
// complete, and records whose words it needs itself.
//
// rows, when not nil, holds every rank's put mask (a gathered round one);
// otherwise they are read from the control words.
func (x *Fence) defer2(tag uint32, rows []uint64) error {
	f, me, n := x.f, x.f.Rank(), x.f.Size()
	z := &x.lz
	z.mu.Lock()
	defer z.mu.Unlock()
	if z.masks == nil {
		z.masks = make([]uint64, n)
		z.wait = make([]bool, n)
		z.ready = make([]bool, n)
	}
	if rows != nil {
		copy(z.masks, rows)
	} else {
		f.SyncMemory()
		for s := range n {
			z.masks[s] = x.c.Load(maskWord(s, x.n))
		}
	}
	nwait := 0
	for i := 1; i < n; i++ {
		r := (me + i) % n
		if z.needs(r, me) {
			var err error
			if x.direct(r) {
				err = x.noteTo(r, control.NoteBarrier, x.n, 0)
			} else {
				err = f.Notify(r, tag)
			}
			if err != nil {
				return err
			}
		}
		z.wait[r] = z.needs(me, r)
		if z.wait[r] {
			nwait++
		}
	}
	z.num = x.n
	z.gen.Add(1)
	if nwait > 0 {
		z.pending.Store(tag)
	}
	return nil
}

// lockPending takes z.mu and returns the pending round's tag, if a round
// two is pending (no lock taken otherwise, nor any when none is).
func (z *lazy) lockPending() (uint32, bool) {
	if z.pending.Load() == 0 {
		return 0, false
	}
	z.mu.Lock()
	tag := z.pending.Load()
	if tag == 0 {
		z.mu.Unlock()
		return 0, false
	}
	return tag, true
}

// Gen identifies the deferred second round (it changes when a fence
// defers a new one): a caller that made a rank ready and then took a lock
// compares it to know that no fence ran in between. Safe for concurrent
// use.
func (x *Fence) Gen() uint64 { return x.lz.gen.Load() }

// Ready waits, if the last fence deferred its second round and this rank
// needs rank r's word that its window is complete, until it has it, and
// returns the generation it waited for. Safe for concurrent use.
func (x *Fence) Ready(r int) (uint64, error) {
	z := &x.lz
	tag, ok := z.lockPending()
	if !ok {
		return z.gen.Load(), nil
	}
	defer z.mu.Unlock()
	if !z.wait[r] || z.ready[r] {
		return z.gen.Load(), nil
	}
	var err error
	if x.direct(r) {
		z.one[0] = r
		err = z.dw.await("fence: waiting for a window's round two", tag, control.NoteBarrier, z.num, z.one[:], x.othersList(), 0)
	} else {
		err = x.f.AwaitNoteFrom(tag, r)
	}
	if err != nil {
		return 0, err
	}
	z.ready[r] = true
	return z.gen.Load(), nil
}

// Settle waits for every word this rank needs of the last fence's
// deferred second round, before an epoch of another kind opens or the
// next fence starts, and returns the generation it settled. Safe for
// concurrent use.
func (x *Fence) Settle() (uint64, error) {
	z := &x.lz
	tag, ok := z.lockPending()
	if !ok {
		return z.gen.Load(), nil
	}
	defer z.mu.Unlock()
	z.missing, z.dmissing = z.missing[:0], z.dmissing[:0]
	for r, w := range z.wait {
		switch {
		case !w || z.ready[r]:
		case x.direct(r):
			z.dmissing = append(z.dmissing, r)
		default:
			z.missing = append(z.missing, r)
		}
	}
	if len(z.dmissing) > 0 {
		if err := z.dw.await("fence: round two", tag, control.NoteBarrier, z.num, z.dmissing, x.othersList(), 0); err != nil {
			return 0, err
		}
	}
	if len(z.missing) > 0 {
		if z.missingFn == nil {
			z.missingFn = func(yield func(int) bool) {
				for _, r := range z.missing {
					if !yield(r) {
						return
					}
				}
			}
		}
		if err := x.f.AwaitNotes(tag, len(z.missing), z.missingFn); err != nil {
			return 0, err
		}
	}
	clear(z.wait)
	clear(z.ready)
	z.pending.Store(0)
	return z.gen.Load(), nil
}
