package transport

import (
	"errors"
	"fmt"
	"github.com/rmago/rmago/internal/spin"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rmago/rmago/internal/futex"
)

// Direct notes: a synchronization protocol's notification to a node-local
// peer reached by direct access (DirectMapped) can be a CPU atomic on a
// word of the peer's memory, a counter or a sequence number, instead of a
// write with immediate data through its queue pair. The peer polls its
// own word; nothing goes through a completion queue, a receive or the
// fabric's lock. It is ordered after every earlier request to the peer,
// as a notification is, because those requests completed at post.
//
// The waiter spins on its words, driving the fabric now and then (to
// learn of failed ranks), then sleeps on a Bell in its memory that the
// notifiers ring after they changed a word; on timeout it ends like a
// notification wait (the grace for failure notices, the ranks seen
// stopped blamed first: waitUntil).

// Bell is where a rank's waits for direct notes sleep: two 32-bit words of
// its shared memory that node-local peers reach too, a ring counter (the
// futex word) and a count of sleepers, on separate cache lines (a notifier
// reads sleepers after every note; a sleeper changes ring's line only
// through the notifiers).
type Bell struct {
	Ring, Sleepers *atomic.Uint32
}

// Alert wakes the bell's sleepers, if any: a notifier calls it after it
// changed a word the sleepers wait for. A sleeper counts itself in
// Sleepers, then looks at its words for a while (sleepRecheck) before it
// sleeps, and Alert reads Sleepers after the change: one of the two sees
// the other. (With an atomic change both are sequentially consistent; a
// notifier that stores with release order only (sync/control's NoteSet)
// may read Sleepers while its store still waits in its core's store
// buffer, which drains well within sleepRecheck.) A sleep is bounded by
// bellSlice in any case.
func (b Bell) Alert() {
	if b.Sleepers.Load() != 0 {
		b.Ring.Add(1)
		futex.Wake(b.Ring)
	}
}

// bellSlice bounds one sleep on a Bell: a failed rank or a failure notice
// does not ring it, so a sleeper looks at the fabric this often. Each
// wake-up costs a rank blocked in a fence about 0.1 ms of CPU here (2
// cores, a paravirtualized guest): with 10 ms slices a rank blocked for a
// second used 1.2-1.9 % of a core, with 100 ms ones 0.3-0.6 %
// (docs/benchmarks.md).
const bellSlice = 100 * time.Millisecond

// On a node with more ranks than cores (shareCores), a direct wait gives
// the core to other processes (sched_yield) at every look but the ones
// that drive the fabric: the rank it waits for may be waiting for this
// core. One-to-many fence3, 8 B, shm, 2 cores, alternating runs: yielding
// every 8 looks after the first 64 took 32-34 µs with 3 ranks and 70-74
// with 4; yielding at every look 17.8-20.7 and 29-46 (Open MPI's shared
// memory 18.5 and 26.1 in the same hour). Every 64 looks had taken 1.7
// times as long as every 8 (2026-11-27). A yield may return only after
// other processes' time slices, so such a wait drives the fabric and looks
// at the clock every sharedLooks looks instead of every directSpins: a
// failure or the deadline is seen about as soon as with the pure spin.
const sharedLooks = 8

// sleepRecheck is how long a direct wait keeps looking at its words after
// it counted itself a sleeper, before it sleeps (Alert).
const sleepRecheck = 5 * time.Microsecond

// directSpins is how many looks at its words a direct wait takes between
// drives of the fabric and looks at the clock.
const directSpins = 64

// DirectWait describes a wait for direct notes from a set of ranks. Bind
// its functions once and reuse it: AwaitDirect allocates nothing unless it
// fails.
type DirectWait struct {
	What string // the operation, for errors: "pscw: start", ...
	// Tag is the notification tag the same wait would have used (kept in
	// errors, and a fence's makes a timeout give up the missing ranks, as
	// a fence's notification wait does).
	Tag uint32
	// Arrived reports whether rank r's note has arrived. It reads words
	// only (no lock held).
	Arrived func(r int) bool
	// Ranks are the ranks whose notes are awaited; a rank of them whose
	// connection ends before its note arrived ends the wait.
	Ranks []int
	// Watch are ranks whose failure (ErrPeer without ErrPeerGone) ends
	// the wait even after their note arrived: the ranks still missing
	// may be stuck on them.
	Watch []int
	// Grace, if not zero, replaces the fabric's NoticeGrace once the
	// timeout passed (AwaitNotesGrace).
	Grace time.Duration
	Bell  Bell

	ranksFn func(yield func(int) bool)
}

// AwaitDirect waits until the note of every rank of w.Ranks has arrived:
// it spins, yielding the core where others need it, for HWSpin, then
// sleeps on w.Bell in slices of bellSlice; it fails when a rank of
// w.Ranks ends without its note, a rank of w.Watch fails, or, after the
// timeout and the grace, naming the ranks of w.Ranks still missing.
func (f *Fabric) AwaitDirect(w *DirectWait) error {
	if w.ready() {
		return nil
	}
	if w.ranksFn == nil {
		w.ranksFn = func(yield func(int) bool) {
			for _, r := range w.Ranks {
				if !yield(r) {
					return
				}
			}
		}
	}
	defer f.EndProgress()
	var deadline, spinEnd time.Time
	y := spin.Yielder{Procs: f.procs}
	every := directSpins
	if f.shareCores {
		every = sharedLooks
	}
	for i := 1; ; i++ {
		if w.ready() {
			return nil
		}
		if i%every != 0 {
			if f.shareCores {
				syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			} else {
				spin.Pause()
			}
			continue
		}
		f.Progress()
		if err := f.directFailed(w); err != nil {
			return err
		}
		now := time.Now()
		if spinEnd.IsZero() {
			spinEnd = now.Add(HWSpin)
			if f.timeout > 0 {
				deadline = now.Add(f.timeout)
			}
		}
		if !deadline.IsZero() && !now.Before(deadline) {
			break
		}
		if now.Before(spinEnd) {
			if f.shareCores || f.engines {
				syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			} else {
				y.Yield(now)
			}
			continue
		}
		d := bellSlice
		if !deadline.IsZero() {
			d = min(d, deadline.Sub(now))
		}
		v := w.Bell.Ring.Load()
		w.Bell.Sleepers.Add(1)
		if !w.readyWithin(sleepRecheck) {
			futex.Wait(w.Bell.Ring, v, d)
		}
		w.Bell.Sleepers.Add(^uint32(0))
	}
	// The timeout passed: the notification waits' ending (the grace for
	// failure notices, the ranks seen stopped blamed first).
	op := waitOp{what: w.What, rank: -1, tags: [2]uint32{w.Tag}, count: len(w.Ranks), grace: w.Grace, arrived: w.Arrived}
	err := f.waitUntil(func() bool { return f.directFailed(w) != nil || w.ready() }, op, deadline, w.ranksFn)
	if err == nil && !w.ready() {
		return f.directFailed(w)
	}
	return err
}

// ready reports whether the note of every rank of w.Ranks has arrived.
func (w *DirectWait) ready() bool {
	for _, r := range w.Ranks {
		if !w.Arrived(r) {
			return false
		}
	}
	return true
}

// readyWithin looks at w's words until ready holds (true) or d passed.
func (w *DirectWait) readyWithin(d time.Duration) bool {
	end := time.Now().Add(d)
	for {
		for range directSpins {
			if w.ready() {
				return true
			}
			spin.Pause()
		}
		if !time.Now().Before(end) {
			return false
		}
	}
}

// directFailed returns the error that ends a direct wait now, if any: the
// fabric failed or closed, a rank of w.Ranks whose note is missing has
// failed or left, or a rank of w.Watch failed.
func (f *Fabric) directFailed(w *DirectWait) error {
	if f.closed.Load() {
		return ErrClosed
	}
	// As checkRank: a failed rank is named before one that left, since
	// ranks leave because of another's failure.
	gone := -1
	for _, r := range w.Ranks {
		if e := f.Err(r); e != nil && !w.Arrived(r) {
			if !errors.Is(e, ErrPeerGone) {
				return fmt.Errorf("%s: rank %d: %w", w.What, r, e)
			}
			if gone < 0 {
				gone = r
			}
		}
	}
	for _, r := range w.Watch {
		if e := f.Err(r); e != nil && !errors.Is(e, ErrPeerGone) {
			return fmt.Errorf("%s: rank %d failed: %w", w.What, r, e)
		}
	}
	if gone >= 0 {
		e := f.Err(gone)
		if p := f.peers[gone].Load(); p != nil && w.Tag>>28 == TagFence {
			e = f.leftMidFence(gone, p, e) // it left before its note of a fence
		}
		return fmt.Errorf("%s: rank %d: %w", w.What, gone, e)
	}
	if r := f.firstLeft(w.Ranks, false, w.Arrived); r >= 0 {
		return fmt.Errorf("%s: %w", w.What, f.leftWait(r, w.Tag>>28 == TagFence))
	}
	return nil
}
