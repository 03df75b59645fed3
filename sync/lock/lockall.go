package lock

import (
	"fmt"
	"time"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// Target mode: lock_all (MPI_Win_lock_all) is a shared lock on every
// rank's window, taken at all targets at once: a shared count at every target's Lock
// word, all posted before any is awaited (one round trip, N atomics).
// It holds if no target has an exclusive holder, nor a waiting writer
// (writers go first, as for shared locks).
//
// Otherwise it never waits holding anything: it withdraws every count
// first. A rank that holds an exclusive lock on one target and waits for
// another could otherwise wait for lock_all's count there while lock_all
// waits for the first lock. So that a stream of exclusive lockers cannot
// keep it out, it leaves a mark at each target where it found an
// exclusive holder: new exclusive lockers of that target wait until the
// marks are gone, and waiting writers there no longer keep lock_all out.
// It then reads the targets that kept it out until they would let it in,
// and tries again; its next attempt takes its marks back with the same
// atomics. Ranks that hold an exclusive lock already ignore the marks
// (the lock_all waiter may be waiting for their lock).

// allTarget is LockAll's state at one target.
type allTarget struct {
	seq     uint64 // the atomic posted to it in this round
	posted  bool   // posted, not failed: seq is to be awaited
	counted bool   // this rank's shared count is in the target's word
	marked  bool   // this rank's mark is in the target's word
	want    bool   // a mark to leave when withdrawing
	last    uint64 // the word as this rank's last atomic saw it (below)
}

// free reports whether lock_all may hold at a target whose word is s:
// no exclusive holder, and no waiting writer unless the target is marked
// (the waiting writers then wait for the marks).
func free(s uint64) bool {
	return s&exclusiveBit == 0 && (s&writerMask == 0 || s&markMask != 0)
}

// A round of lock_all's atomics, one per target (posted together, then
// awaited together).
type allRound int

const (
	allTry      allRound = iota // a count everywhere, this rank's marks taken back
	allWithdraw                 // the counts taken back, marks left where wanted
	allLook                     // read the targets that are not free, marking exclusive holders
	allAbandon                  // counts and marks taken back
)

// addend is the fetch-add that round r posts to the target, and whether
// it posts one; it records the target's state once the atomic lands.
func (a *allTarget) addend(r allRound) (uint64, bool) {
	var v uint64
	switch r {
	case allTry:
		v = 1
		if a.marked {
			v += minusMark
		}
		a.counted, a.marked = true, false
		return v, true
	case allWithdraw:
		v = minusShared
		if a.want {
			v += markOne
		}
		a.counted, a.marked = false, a.want
		return v, true
	case allLook:
		if free(a.last) {
			return 0, false
		}
		if a.last&exclusiveBit != 0 && !a.marked {
			a.want, a.marked = true, true
			return markOne, true
		}
		return 0, true
	}
	if a.counted {
		v += minusShared
	}
	if a.marked {
		v += minusMark
	}
	a.counted, a.marked = false, false
	return v, v != 0
}

// lockAll takes lock_all in target mode.
func (l *Locks) lockAll(b *backoff) error {
	clear(l.all)
	for {
		if err := l.round(allTry, 0); err != nil {
			return l.abandonAll(err)
		}
		t := l.busyTarget()
		if t < 0 {
			return nil
		}
		for t := range l.all {
			a := &l.all[t]
			a.want = a.want || a.last&exclusiveBit != 0
		}
		if err := l.round(allWithdraw, 0); err != nil {
			return l.abandonAll(err)
		}
		for t = l.busyTarget(); t >= 0; t = l.busyTarget() {
			if err := l.pause(b); err != nil {
				return l.abandonAll(busyAt(err, t, l.all[t].last))
			}
			if err := l.round(allLook, 0); err != nil {
				return l.abandonAll(err)
			}
		}
	}
}

// busyTarget is the first target whose last seen word keeps lock_all
// out, or -1.
func (l *Locks) busyTarget() int {
	for t := range l.all {
		if !free(l.all[t].last) {
			return t
		}
	}
	return -1
}

// abandonAll takes this rank's counts and marks back from every target
// whose word it knows them to be in, and returns err. Its waits are
// bounded by the fabric's notice grace: a stopped target is given up
// rather than waited for a second whole timeout.
func (l *Locks) abandonAll(err error) error {
	if uerr := l.round(allAbandon, l.f.NoticeGrace()); uerr != nil {
		return fmt.Errorf("%w (and while withdrawing: %w)", err, uerr)
	}
	return err
}

// round posts round r's atomics, then awaits them (each wait bounded by
// within if nonzero), and records what each saw: for allTry the word
// before the count (with this rank's marks, which let it past waiting
// writers), otherwise the word after this rank's atomic. An atomic that
// fails leaves that target's state unknown: it is then forgotten (the
// job is expected to end). It returns the first error.
func (l *Locks) round(r allRound, within time.Duration) error {
	var first error
	for t := range l.all {
		a := &l.all[t]
		a.posted = false
		v, ok := a.addend(r)
		if !ok {
			continue
		}
		seq, err := l.slots[t].post(t, control.Lock, transport.FetchAddOp, v, 0, 0)
		if err != nil {
			a.counted, a.marked = false, false
			first = firstErr(first, t, err)
			continue
		}
		a.seq, a.posted = seq, true
		if r != allTry {
			a.last = v // added to the old value below
		} else {
			a.last = 0
		}
	}
	for t := range l.all {
		a := &l.all[t]
		if !a.posted {
			continue
		}
		var err error
		if within > 0 {
			err = l.f.AwaitWithin(t, a.seq, within)
		} else {
			err = l.f.Await(t, a.seq)
		}
		if err != nil {
			a.counted, a.marked, a.last = false, false, 0
			first = firstErr(first, t, err)
			continue
		}
		a.last += l.slots[t].result(0)
	}
	return first
}

// firstErr keeps the first error of a round of atomics, naming its target.
func firstErr(first error, t int, err error) error {
	if first != nil {
		return first
	}
	return fmt.Errorf("rank %d: %w", t, err)
}

// unlockAll releases lock_all in target mode: one release per target.
func (l *Locks) unlockAll() error {
	var first error
	for t := range l.all {
		a := &l.all[t]
		a.posted = false
		sl := &l.slots[t]
		if !l.f.Outstanding(t) {
			if err := l.released(t, sl.postRelease(t, control.Lock, minusShared, relTWord)); err != nil {
				first = firstErr(first, t, err)
			}
			continue
		}
		seq, err := sl.post(t, control.Lock, transport.FetchAddOp, minusShared, 0, 0)
		if err != nil {
			first = firstErr(first, t, err)
			continue
		}
		a.seq, a.posted = seq, true
	}
	for t := range l.all {
		if a := &l.all[t]; a.posted {
			if err := l.f.Await(t, a.seq); err != nil {
				first = firstErr(first, t, err)
			}
		}
	}
	return first
}
