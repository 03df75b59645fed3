// Package lock is the passive-target lock protocol of rmago windows
// (MPI_Win_lock, MPI_Win_unlock, MPI_Win_lock_all, MPI_Win_unlock_all),
// after foMPI's: remote atomics on a lock word per target (target.go) and
// on the leader's Global word (global.go), which keeps lock_all and
// exclusive locks apart; the target's CPU takes no part. Words, protocol,
// costs, backoff and failures: docs/sync-protocols.md.
//
// The package keeps no epoch state: package rma's state machine decides
// which call may run, and calls Lock only for a target this rank does not
// lock, Unlock only for a lock it holds (in the mode it was taken in),
// LockAll only while it holds no lock, locks only while it does not hold
// lock_all, and at most one call at a time per target (and for lock_all):
// each target, and lock_all, has its own result words and work request
// (slot). Calls on different targets run concurrently; the mutex guards
// only the count of exclusive locks held (see Lock) and is never held
// across a remote wait. NoCheck locks (MPI_MODE_NOCHECK) do not reach this
// package.
package lock

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// ErrJobSize means the job has more ranks than the Global word can count
// (maxClass); NoCheck locks, which take no atomics, still work.
var ErrJobSize = errors.New("lock: job too large for the lock words")

// errBusy marks a wait that timed out while the lock words still
// answered (the lock stayed busy), as opposed to an atomic that did not
// complete.
var errBusy = errors.New("the lock stayed busy")

// Leader is the rank whose Global word arbitrates between exclusive locks
// and lock_all.
const Leader = 0

// Locks is one window's passive-target lock protocol on this rank.
type Locks struct {
	c    *control.Region
	f    *transport.Fabric
	me   int
	size int

	// mu guards nexcl, the number of this rank's exclusive locks (each an
	// exclusive holder at the Global word), and orders the Global atomics
	// posted under it (see Lock). It is never held across a remote wait.
	mu    sync.Mutex
	nexcl int

	slots []slot // per target, then lock_all's
}

// New returns the lock protocol of the window whose control region is c.
// It is local (not collective) and takes no lock.
func New(c *control.Region) *Locks {
	n := c.F.Size()
	l := &Locks{c: c, f: c.F, me: c.F.Rank(), size: n, slots: make([]slot, n+1)}
	for t := range l.slots {
		l.slots[t] = slot{l: l, word: control.LockResult(n, t)}
	}
	return l
}

// Lock takes a shared or exclusive lock on rank target's window, waiting
// (with backoff, bounded by the fabric's timeout) while a conflicting lock
// is held.
func (l *Locks) Lock(target int, exclusive bool) error {
	if l.size > maxClass {
		return fmt.Errorf("%w: %d ranks, at most %d", ErrJobSize, l.size, maxClass)
	}
	sl := &l.slots[target]
	// A rank that already holds an exclusive lock is an exclusive holder
	// at the Global word: a second exclusive lock joins it there without
	// waiting, since lock_all cannot be held meanwhile. (Waiting behind a
	// lock_all waiter would deadlock: it waits for the first lock's
	// release.) Posting the arrival under the mutex orders it, on the
	// queue pair to the leader, before the release of any lock this rank
	// holds, which Unlock posts under the mutex as well.
	l.mu.Lock()
	var seqG uint64
	var err error
	joined := exclusive && l.nexcl > 0
	if joined {
		seqG, err = sl.post(Leader, control.Global, transport.FetchAddOp, classExcl.one(), 0, 0)
	}
	l.mu.Unlock()

	if err == nil {
		var b backoff
		b.reset(l.f.Timeout())
		if exclusive {
			err = l.lockExclusive(sl, target, &b, joined, seqG)
		} else {
			err = l.lockShared(sl, target, &b)
		}
	}
	if err != nil {
		return fmt.Errorf("lock: %s lock on rank %d: %w", modeName(exclusive), target, err)
	}
	if exclusive {
		l.mu.Lock()
		l.nexcl++
		l.mu.Unlock()
	}
	return nil
}

// LockAll takes a shared lock on every rank's window (MPI_Win_lock_all)
// with one atomic at the leader, waiting while exclusive locks are held
// (or, for fairness, waited for) anywhere.
func (l *Locks) LockAll() error {
	if l.size > maxClass {
		return fmt.Errorf("%w: %d ranks, at most %d", ErrJobSize, l.size, maxClass)
	}
	var b backoff
	b.reset(l.f.Timeout())
	sl := &l.slots[l.size]
	old, err := sl.add(Leader, control.Global, classAll.one())
	if err == nil {
		err = l.enterGlobal(sl, classAll, old, &b, -1)
	}
	if err != nil {
		return fmt.Errorf("lock: lock_all: %w", err)
	}
	return nil
}

// pause backs off once while a lock is busy. It fails when the deadline
// has passed or a connection of this rank has failed (target < 0:
// lock_all).
func (l *Locks) pause(b *backoff, target int) error {
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
// atomic of this rank to target or to the leader follows it down the same
// queue pair, and Close waits for it.
func (l *Locks) Unlock(target int, exclusive bool) error {
	sl := &l.slots[target]
	wait := l.f.Outstanding(target)
	var err error
	switch {
	case !exclusive && wait:
		_, err = sl.add(target, control.Lock, minusShared)
	case !exclusive:
		err = l.released(target, sl.postRelease(target, control.Lock, minusShared, relTWord))
	default:
		err = l.unlockExclusive(sl, target, wait)
	}
	if err != nil {
		return fmt.Errorf("lock: unlock of rank %d: %w", target, err)
	}
	return nil
}

// unlockExclusive releases the exclusive lock on target: target's word and
// the leader's Global word, both posted before either is awaited. Without
// wait, neither is awaited, and the hand-over to lock_all waiters (best
// effort) is left to them.
func (l *Locks) unlockExclusive(sl *slot, target int, wait bool) error {
	// Posted under the mutex: see Lock.
	l.mu.Lock()
	l.nexcl--
	if !wait {
		err := sl.postReleases(target, release(l.me), classExcl.minusOne())
		l.mu.Unlock()
		if err == nil {
			err = l.f.Err(Leader)
		}
		return l.released(target, err)
	}
	seqT, err, seqG, errG := sl.postPair(req{target, control.Lock, transport.FetchAddOp, release(l.me), 0, 0},
		req{Leader, control.Global, transport.FetchAddOp, classExcl.minusOne(), 0, 1})
	l.mu.Unlock()
	if err != nil {
		return err
	}
	err = l.f.Await(target, seqT)
	// With target the leader, the Global release is queued behind the
	// failed one: waiting for it would wait out a second timeout.
	if errG == nil && (err == nil || target != Leader) {
		if errG = l.f.Await(Leader, seqG); errG == nil {
			errG = l.handOver(sl, classExcl, sl.result(1))
		}
	}
	return errors.Join(err, errG)
}

// released is the result of a release posted without waiting: err, else
// the error of the connection to target if it has failed.
func (l *Locks) released(target int, err error) error {
	if err != nil {
		return err
	}
	return l.f.Err(target)
}

// UnlockAll releases lock_all. The caller has completed the operations it
// issued under it, so the release is posted without waiting for it (see
// Unlock), unless a request to the leader is still outstanding.
func (l *Locks) UnlockAll() error {
	sl := &l.slots[l.size]
	var err error
	if l.f.Outstanding(Leader) {
		err = l.releaseGlobal(sl, classAll)
	} else {
		err = l.released(Leader, sl.postRelease(Leader, control.Global, classAll.minusOne(), relGWord))
	}
	if err != nil {
		return fmt.Errorf("lock: unlock_all: %w", err)
	}
	return nil
}

// Close waits for the releases that Unlock and UnlockAll posted without
// waiting, so that their results have landed before the control region is
// closed. Call it when the window is freed, with no lock call running.
func (l *Locks) Close() error {
	var errs []error
	for t := range l.slots {
		sl := &l.slots[t]
		if sl.relT != 0 {
			errs = append(errs, l.f.Await(t, sl.relT))
			sl.relT = 0
		}
		if sl.relG != 0 {
			errs = append(errs, l.f.Await(Leader, sl.relG))
			sl.relG = 0
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
