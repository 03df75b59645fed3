// Package lock is the passive-target lock protocol of rmago windows
// (MPI_Win_lock, MPI_Win_unlock, MPI_Win_lock_all, MPI_Win_unlock_all):
// remote atomics on one lock word per target (target.go), after foMPI's
// per-target words; lock_all counts itself as a shared holder at every
// target at once (lockall.go), so that an exclusive lock needs its target's
// word only. The target's CPU takes no part. Words, protocol, costs,
// backoff and failures: docs/sync-protocols.md.
//
// The package keeps no epoch state: package rma's state machine decides
// which call may run, and calls Lock only for a target this rank does not
// lock, Unlock only for a lock it holds (in the mode it was taken in),
// LockAll only while it holds no lock and no Lock call runs, locks only
// while it does not hold lock_all, and at most one call at a time per
// target: each target has its own result words and work request (slot),
// which LockAll and UnlockAll borrow. Calls on different targets run
// concurrently and share no lock. NoCheck locks (MPI_MODE_NOCHECK) do not
// reach this package.
package lock

import (
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// ErrJobSize means the job has more ranks than the lock words can count
// (maxRanks); NoCheck locks, which take no atomics, still work.
var ErrJobSize = errors.New("lock: job too large for the lock words")

// errBusy marks a wait that timed out while the lock words still
// answered (the lock stayed busy), as opposed to an atomic that did not
// complete.
var errBusy = errors.New("the lock stayed busy")

// Locks is one window's passive-target lock protocol on this rank.
type Locks struct {
	c    *control.Region
	f    *transport.Fabric
	me   int
	size int

	// nexcl is the number of exclusive locks this rank holds: while it
	// has one, its writers do not wait for lock_all waiters' marks.
	nexcl atomic.Int32

	slots []slot      // per target
	all   []allTarget // lock_all's state per target (lockall.go)
}

// New returns the lock protocol of the window whose control region is c.
// It is local (not collective) and takes no lock.
func New(c *control.Region) *Locks {
	n := c.F.Size()
	l := &Locks{c: c, f: c.F, me: c.F.Rank(), size: n, slots: make([]slot, n), all: make([]allTarget, n)}
	for t := range l.slots {
		l.slots[t] = slot{l: l, word: control.LockResult(n, t)}
	}
	return l
}

// sizeErr is ErrJobSize for a job too large for the lock words.
func (l *Locks) sizeErr() error {
	if l.size > maxRanks {
		return fmt.Errorf("%w: %d ranks, at most %d", ErrJobSize, l.size, maxRanks)
	}
	return nil
}

// Lock takes a shared or exclusive lock on rank target's window, waiting
// (with backoff, bounded by the fabric's timeout) while a conflicting lock
// is held.
func (l *Locks) Lock(target int, exclusive bool) error {
	err := l.sizeErr()
	if err == nil {
		sl := &l.slots[target]
		var b backoff
		b.reset(l.f.Timeout())
		if exclusive {
			err = l.lockExclusive(sl, target, &b)
		} else {
			err = l.lockShared(sl, target, &b)
		}
	}
	if err != nil {
		return fmt.Errorf("lock: %s lock on rank %d: %w", modeName(exclusive), target, err)
	}
	if exclusive {
		l.nexcl.Add(1)
	}
	return nil
}

// pause backs off once while a lock is busy. It fails when the deadline
// has passed or a connection of this rank has failed.
func (l *Locks) pause(b *backoff) error {
	// Poll the completion queues once: on shm every atomic of this loop
	// completes at post, so nothing else would take the error completions
	// that tell of a failed peer (a holder killed with the lock).
	l.f.Progress()
	l.f.EndProgress()
	for r := range l.size {
		if err := l.f.Err(r); err != nil {
			return fmt.Errorf("rank %d failed while the lock was busy (it may be the holder): %w", r, err)
		}
	}
	if !b.pause() {
		return fmt.Errorf("%w after %v (%w)", transport.ErrTimeout, l.f.Timeout(), errBusy)
	}
	return nil
}

// Unlock releases this rank's lock on target, taken exclusive or not. The
// caller has completed the operations it issued under the lock, except
// puts: the release is ordered after every request this rank posted to
// target. If one of them is still outstanding, Unlock waits for the
// release, whose completion implies theirs (one round trip); otherwise it
// posts the release and returns without waiting (no round trip): a later
// atomic of this rank to target follows it down the same queue pair, and
// Close waits for it.
func (l *Locks) Unlock(target int, exclusive bool) error {
	sl := &l.slots[target]
	v := minusShared
	if exclusive {
		v = release(l.me)
		l.nexcl.Add(-1)
	}
	var err error
	if l.f.Outstanding(target) {
		_, err = sl.add(target, control.Lock, v)
	} else {
		err = l.released(target, sl.postRelease(target, v))
	}
	if err != nil {
		return fmt.Errorf("lock: unlock of rank %d: %w", target, err)
	}
	return nil
}

// released is the result of a release posted without waiting: err, else
// the error of the connection to target if it has failed.
func (l *Locks) released(target int, err error) error {
	if err != nil {
		return err
	}
	return l.f.Err(target)
}

// Close waits for the releases that Unlock and UnlockAll posted without
// waiting, so that their results have landed before the control region is
// closed. Call it when the window is freed, with no lock call running.
func (l *Locks) Close() error {
	var errs []error
	for t := range l.slots {
		sl := &l.slots[t]
		if sl.rel != 0 {
			errs = append(errs, l.f.Await(t, sl.rel))
			sl.rel = 0
		}
	}
	return errors.Join(errs...)
}

func modeName(exclusive bool) string {
	if exclusive {
		return "exclusive"
	}
	return "shared"
}
