// Package fence is the fence synchronization of rmago windows
// (MPI_Win_fence). Below DisseminationMin ranks: a round of notifications
// among all ranks (zero-length RDMA writes with immediate data), each
// following the rank's puts down the same queue pairs (on crowded nodes
// gathered through rank 0 instead: gather.go), and, when some rank put
// and the job has three ranks or more, a second round that is a barrier
// only, awaited lazily where it is needed (lazy.go). From DisseminationMin
// ranks: a flush of every rank this rank accessed, then a dissemination
// barrier (ceil(log2 size) rounds of one notification). Between ranks on
// shm, on a window with control words, each notification is a direct note
// instead, a store into the receiver's words (direct.go). Protocol and
// costs: docs/sync-protocols.md.
//
// It keeps no epoch state: package rma's state machine runs one Sync at a
// time per window, once the epoch's operations have been issued.
package fence

import (
	"cmp"
	"errors"
	"math/bits"
	"slices"
	"time"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// putBit marks a round-one notification from a rank that put data.
const putBit = 2

// stepShift places a dissemination step's number (1, 2, ...) in a tag's
// caller bits, above putBit.
const stepShift = 2

// DisseminationMin is the job size from which the second round is a
// dissemination barrier rather than all-to-all: below it, one round of
// size-1 notifications costs less time than ceil(log2 size) dependent
// rounds of one.
const DisseminationMin = 8

// Fence is one window's fence protocol: its id and its rounds so far.
type Fence struct {
	f  *transport.Fabric
	id uint16
	// Fences run so far: a fence's notifications carry its parity, and a
	// rank is never more than one fence ahead of another (it cannot pass
	// round one of the next before every rank has ended round one of
	// this), so an early notification never counts for the wrong fence.
	n uint32

	// The running dissemination step's sender, and the iterator that tells
	// the fabric's wait which ranks to watch (bound once: no allocation
	// per wait).
	from   int
	fromFn func(yield func(int) bool)

	// Sync's split of its flush list, and the ranks barrier notified
	// first (reused: no allocation per fence).
	before, after []int
	sent          []bool

	// A gathered round one (gather.go): every rank's put mask, and every
	// other rank (an iterator bound once).
	rows     []uint64
	othersFn func(yield func(int) bool)

	c  *control.Region // UseControl: the put masks' and direct notes' words
	lz lazy            // a second round awaited lazily (lazy.go)

	// Direct notes (direct.go): the rounds' wait, every other rank, and a
	// round's ranks split into those notified directly and the others
	// (with an iterator over the latter, bound once).
	dw             directWait
	others         []int
	dranks, nranks []int
	step           [1]int
	nranksFn       func(yield func(int) bool)
}

// New returns the fence of the window with the given id (equal on every rank).
func New(f *transport.Fabric, id uint16) *Fence {
	x := &Fence{f: f, id: id}
	x.fromFn = x.watch
	x.dw.init(x)
	x.lz.dw.init(x)
	x.nranksFn = func(yield func(int) bool) {
		for _, r := range x.nranks {
			if !yield(r) {
				return
			}
		}
	}
	return x
}

// Sync runs one fence, its second round (if any) awaited before it
// returns; SyncTo says more.
func (x *Fence) Sync(flush []int, put bool) error { return x.run(flush, put, nil) }

// SyncTo runs one fence; putTo says, per rank, whether this rank put data
// into that rank's window (or changed it with atomics) since the last
// fence. On a window whose fence has control words (UseControl), with 3
// to DisseminationMin-1 ranks, the second round is then awaited lazily and
// only where a third rank put (lazy.go).
func (x *Fence) SyncTo(flush []int, putTo []bool) error {
	put := false
	for _, p := range putTo {
		put = put || p
	}
	return x.run(flush, put, putTo)
}

// run is Sync and SyncTo.
//
// Sync runs one fence. flush lists the ranks with reads or atomics to
// complete; put says whether this rank put data since the last fence.
//
// The reads and atomics must be complete before any rank that could then
// change their targets' memory leaves the fence: every rank but their
// target itself, which, when its provider delivers a notification only
// after the reads and atomics before it (transport.ReadsBeforeRecv: soft,
// shm), is sent its notification before they complete. The target then
// goes on half a round trip sooner (2 ranks: the target of a get is
// released by the notification that follows the get). Past the fence the
// target may read or write this rank's memory, where the reads' data
// lands: such a provider also delivers the target's later requests after
// its answers to the reads (soft keeps them in order on the stream:
// verbs/soft/held.go; rma's TestFenceGetLandsBeforeTargetReads). Reads
// on other providers (a NIC's) complete before any notification. A
// target released by its own notification could write into another
// target at once: all-to-all, only a single target is released so.
func (x *Fence) run(flush []int, put bool, putTo []bool) error {
	if _, err := x.Settle(); err != nil {
		return err
	}
	x.n++
	base := transport.MakeTag(transport.TagFence, x.id, x.n)
	x.before, x.after = x.before[:0], x.after[:0]
	for _, r := range flush {
		if r != x.f.Rank() && x.f.ReadsBeforeRecv(r) {
			x.after = append(x.after, r)
		} else {
			x.before = append(x.before, r)
		}
	}
	if putTo != nil && x.f.Size() >= DisseminationMin && !x.f.DirectNotesAnywhere() {
		return x.flushBarrier(base, putTo)
	}
	lazy := putTo != nil && x.lazyOK()
	gathered := lazy && x.gatherOK()
	if len(x.after) > 1 && !gathered {
		// A target notified early could leave round one, and write to
		// another target, before this rank's read there has run: only
		// the gathered form (where nobody leaves before the root has
		// heard from this rank, after its flushes) or a single target
		// may be released by its own notification.
		x.before = append(x.before, x.after...)
		x.after = x.after[:0]
	}
	if err := x.f.FlushRanks(x.before); err != nil {
		return err
	}
	if gathered {
		if len(x.rows) != x.f.Size() {
			x.rows = make([]uint64, x.f.Size())
		}
		anyPut, err := x.gathered(base, putTo, x.after, x.rows)
		if err != nil || !anyPut {
			return err
		}
		return x.defer2(base|1<<stepShift, x.rows)
	}
	var merr error
	if lazy {
		// A mask that cannot be written still lets the notes go (barrier).
		merr = x.sendMask(putTo)
	}
	anyPut, err := x.barrier(base, control.NoteFence, put, x.after)
	if merr != nil {
		return merr
	}
	if err != nil || !anyPut || x.f.Size() <= 2 {
		return err
	}
	if x.f.Size() < DisseminationMin {
		if lazy {
			return x.defer2(base|1<<stepShift, nil)
		}
		_, err = x.barrier(base|1<<stepShift, control.NoteBarrier, false, nil)
		return err
	}
	return x.disseminate(base)
}

// flushBarrier is SyncTo from DisseminationMin ranks: this rank flushes
// every rank it put into, read from or ran atomics on (a flush completes
// when everything posted to that rank before it has completed there), then
// runs the dissemination barrier. Once past it, every rank's accesses of
// the epoch are complete everywhere. Round one's size-1 notifications a
// rank (size(size-1) a fence, each taking a receive and a wake-up at its
// target) become one flush per target and ceil(log2 size) notes: one more
// hop (the flush's round trip) for O(targets + log size) messages, as
// foMPI's fence does. Measured on 2 cores, one-to-many fence3 8-64 B: N =
// 8 1132-1507 -> 739-856 µs, N = 16 4436-5231 -> 1911-2533.
//
// Not in a job with shm peers (transport's DirectNotesAnywhere): there a
// barrier's notes are direct stores, which open no queue pair, and a rank
// learns that a node-local peer left only through one; round one's
// all-to-all waits name the rank that left, a barrier's would name the
// healthy ranks stuck on it.
func (x *Fence) flushBarrier(base uint32, putTo []bool) error {
	x.before = append(x.before, x.after...)
	x.after = x.after[:0]
	for r, p := range putTo {
		if p && r != x.f.Rank() && !slices.Contains(x.before, r) {
			x.before = append(x.before, r)
		}
	}
	// A flush that fails (its rank failed or left) does not stop this
	// rank before the barrier: the ranks waiting for its notes would wait
	// out the timeout and name it. The barrier fails where it must, and
	// this rank's error is the flush's.
	ferr := x.f.FlushRanks(x.before)
	if err := x.disseminate(base); ferr == nil {
		return err
	}
	return ferr
}

// disseminate is a barrier in ceil(log2 size) steps: at step k (d = 2^k)
// this rank notifies rank me+d and waits for rank me-d's notification, so
// that after the last step every rank has heard, directly or through
// others, from every rank. It orders nothing: round one has already
// delivered every put.
func (x *Fence) disseminate(base uint32) error {
	f := x.f
	n, me := f.Size(), f.Rank()
	steps := bits.Len(uint(n - 1)) // ceil(log2 n)
	step := uint32(1)
	for d := 1; d < n; d, step = 2*d, step+1 {
		tag := base | step<<stepShift
		var err error
		if to := (me + d) % n; x.direct(to) {
			err = x.noteTo(to, control.NoteBarrier, x.n, 0)
		} else {
			err = f.Notify(to, tag)
		}
		if err != nil {
			return err
		}
		x.from = (me - d + n) % n
		grace := stepGrace(f.NoticeGrace(), int(step), steps)
		if x.direct(x.from) {
			x.step[0] = x.from
			err = x.dw.await("fence: dissemination step", tag, control.NoteBarrier, x.n, x.step[:], x.othersList(), grace)
		} else {
			err = f.AwaitNotesGrace(tag, 1, x.fromFn, grace)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// stepGrace is the grace for failure notices of dissemination step step
// (1..steps) once its wait has timed out: a rank that has not sent its
// step-k notification is stuck at an earlier step, so the chain of waits
// behind a failed rank runs through ever earlier steps down to the one
// waiting for it. Graces growing with the step (g/steps, 2g/steps, ... g)
// let that rank give the failed one up, and tell the others, before they
// blame a healthy rank that waits too.
func stepGrace(g time.Duration, step, steps int) time.Duration {
	return g * time.Duration(step) / time.Duration(max(steps, 1))
}

// watch yields the ranks whose failure ends a dissemination step's wait:
// the rank it waits for, and any rank that failed (not one that left in
// order: a rank may leave once it is past the barrier).
func (x *Fence) watch(yield func(int) bool) {
	if !yield(x.from) {
		return
	}
	for r := range x.f.Size() {
		if r == x.from || r == x.f.Rank() {
			continue
		}
		if err := x.f.Err(r); err != nil && !errors.Is(err, transport.ErrPeerGone) && !yield(r) {
			return
		}
	}
}

// barrier is one round: a notification (or a direct note of kind) to
// every other rank, one awaited from each. It reports whether any rank
// flagged a put. The ranks of first are notified first, and the others
// once the reads and atomics to the ranks of first have completed (see
// Sync).
func (x *Fence) barrier(tag uint32, kind int, put bool, first []int) (bool, error) {
	mine, flag := tag, uint64(0)
	if put {
		mine, flag = tag|putBit, 1
	}
	f := x.f
	if len(first) > 0 {
		if x.sent == nil {
			x.sent = make([]bool, f.Size())
		}
		for _, r := range first {
			x.sent[r] = true
			// Signalled: its completion implies the reads' before it,
			// so the flush below needs no request of its own (one write
			// to the socket, not two, on soft). (A rank notified
			// directly: its reads completed at post.)
			var err error
			if x.direct(r) {
				err = x.noteTo(r, kind, x.n, flag)
			} else {
				_, err = f.NotifySignaled(r, mine)
			}
			if err != nil {
				clear(x.sent)
				return false, err
			}
		}
		if err := f.FlushRanks(first); err != nil {
			clear(x.sent)
			return false, err
		}
	}
	// A rank this rank cannot reach (it failed or left) does not keep the
	// others from their notes: they would wait out the timeout and name
	// this rank. The round then ends with the first error, unawaited.
	var serr error
	for i := 1; i < f.Size(); i++ {
		r := (f.Rank() + i) % f.Size()
		if len(first) > 0 && x.sent[r] {
			x.sent[r] = false
			continue
		}
		var err error
		switch {
		case x.direct(r):
			err = x.noteTo(r, kind, x.n, flag)
		case f.HasEitherNote(tag, tag|putBit, r):
			// r is past this round already: this rank, the last, goes on
			// at once, and its note may leave with what it sends next
			// (on soft, one write instead of two, unless the program
			// leaves such notes behind: verbs/soft/hold.go).
			err = f.NotifySoon(r, mine)
		default:
			err = f.Notify(r, mine)
		}
		serr = cmp.Or(serr, err)
	}
	if serr != nil {
		return false, serr
	}
	x.dranks, x.nranks = x.dranks[:0], x.nranks[:0]
	for _, r := range x.othersList() {
		if x.direct(r) {
			x.dranks = append(x.dranks, r)
		} else {
			x.nranks = append(x.nranks, r)
		}
	}
	anyPut := put
	if len(x.dranks) > 0 {
		if err := x.dw.await("fence", tag, kind, x.n, x.dranks, x.others, 0); err != nil {
			return false, err
		}
		for _, r := range x.dranks {
			anyPut = anyPut || kind == control.NoteFence && x.flagged(r, x.n)
		}
	}
	if len(x.nranks) > 0 {
		withPut, err := f.AwaitNotesEitherFrom(tag, tag|putBit, len(x.nranks), x.nranksFn)
		if err != nil {
			return false, err
		}
		anyPut = anyPut || withPut > 0
	}
	return anyPut, nil
}
