// Package lock is the passive-target lock protocol of rmago windows
// (MPI_Win_lock, MPI_Win_unlock, MPI_Win_lock_all, MPI_Win_unlock_all):
// remote atomics on one lock word per target (target.go), after foMPI's;
// the target's CPU takes no part. Two ways keep lock_all and exclusive
// locks apart, chosen per job (New):
//
//   - target mode (lockall.go), where every rank is reached through CPU
//     atomics on mapped words (shm, one node): lock_all counts itself as a
//     shared holder at every target at once, and an exclusive lock needs
//     its target's word only;
//   - leader mode (global.go), where some rank is reached through a
//     network: the leader's Global word arbitrates, so that lock_all is one
//     message whatever the job size.
//
// Words, protocol, costs, backoff and failures: docs/sync-protocols.md.
//
// The package keeps no epoch state: package rma's state machine decides
// which call may run, and calls Lock only for a target this rank does not
// lock, Unlock only for a lock it holds (in the mode it was taken in),
// LockAll only while it holds no lock and no Lock call runs, locks only
// while it does not hold lock_all, and at most one call at a time per
// target (and for lock_all): each target has its own result words and
// work request (slot). Calls on different targets run concurrently; the
// mutex (leader mode) guards only the order of Global atomics and is never
// held across a remote wait. NoCheck locks (MPI_MODE_NOCHECK) do not reach
// this package.
package lock

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// ErrJobSize means the job has more ranks than the lock words can count
// (maxClass in leader mode, maxRanks in target mode); NoCheck locks, which
// take no atomics, still work.
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

	// target: target mode (lockall.go), else leader mode (global.go).
	target bool

	// nexcl is the number of exclusive locks this rank holds: in target
	// mode, while it has one, its writers do not wait for lock_all
	// waiters' marks; in leader mode it is an exclusive holder at the
	// Global word meanwhile. mu (leader mode) orders the Global atomics
	// posted under it (see lockExclusiveLeader); it is never held across
	// a remote wait.
	mu    sync.Mutex
	nexcl atomic.Int32

	slots []slot      // per target, then leader mode's lock_all
	all   []allTarget // target mode's lock_all, per target
}

// New returns the lock protocol of the window whose control region is c.
// It is local (not collective) and takes no lock. Every rank of a job
// chooses the same mode: target mode if every rank is reached through a
// provider whose atomics complete at post (CPU atomics on mapped memory),
// which the fabric decides by node, the same way on every rank.
func New(c *control.Region) *Locks {
	return newMode(c, cpuAtomics(c.F))
}

// cpuAtomics reports whether every rank, this one included, is reached
// through a provider whose atomics complete at post.
func cpuAtomics(f *transport.Fabric) bool {
	for r := range f.Size() {
		if !f.ContextOf(r).Attr().CompletesAtPost {
			return false
		}
	}
	return true
}

// newMode returns the lock protocol in target mode if target, else in
// leader mode.
func newMode(c *control.Region, target bool) *Locks {
	n := c.F.Size()
	l := &Locks{c: c, f: c.F, me: c.F.Rank(), size: n, target: target, slots: make([]slot, n+1)}
	if target {
		l.all = make([]allTarget, n)
	}
	for t := range l.slots {
		l.slots[t] = slot{l: l, word: control.LockResult(n, t)}
	}
	return l
}

// sizeErr is ErrJobSize for a job too large for the lock words.
func (l *Locks) sizeErr() error {
	max := maxClass
	if l.target {
		max = maxRanks
	}
	if l.size > max {
		return fmt.Errorf("%w: %d ranks, at most %d", ErrJobSize, l.size, max)
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
		b.reset(l.f.Timeout(), l.f.Crowded())
		switch {
		case !exclusive:
			err = l.lockShared(sl, target, &b)
		case l.target:
			if err = l.lockExclusive(sl, target, &b); err == nil {
				l.nexcl.Add(1)
			}
		default:
			err = l.lockExclusiveLeader(sl, target, &b)
		}
	}
	if err != nil {
		return fmt.Errorf("lock: %s lock on rank %d: %w", modeName(exclusive), target, err)
	}
	return nil
}

// LockAll takes a shared lock on every rank's window (MPI_Win_lock_all),
// waiting while an exclusive lock is held (or, for fairness, waited for)
// anywhere. Call it only while no Lock call runs.
func (l *Locks) LockAll() error {
	err := l.sizeErr()
	if err == nil {
		var b backoff
		b.reset(l.f.Timeout(), l.f.Crowded())
		if l.target {
			err = l.lockAll(&b)
		} else {
			err = l.lockAllGlobal(&b)
		}
	}
	if err != nil {
		return fmt.Errorf("lock: lock_all: %w", err)
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
// atomic of this rank to target (or to the leader) follows it down the
// same queue pair, and Close waits for it.
func (l *Locks) Unlock(target int, exclusive bool) error {
	sl := &l.slots[target]
	wait := l.f.Outstanding(target)
	var err error
	switch {
	case exclusive && !l.target:
		err = l.unlockExclusive(sl, target, wait)
	default:
		v := minusShared
		if exclusive {
			v = release(l.me)
			l.nexcl.Add(-1)
		}
		if wait {
			_, err = sl.add(target, control.Lock, v)
		} else {
			err = l.released(target, sl.postRelease(target, control.Lock, v, relTWord))
		}
	}
	if err != nil {
		return fmt.Errorf("lock: unlock of rank %d: %w", target, err)
	}
	return nil
}

// UnlockAll releases lock_all. The caller has completed the operations it
// issued under it, so each release is posted without waiting for it (see
// Unlock), unless a request to its target is still outstanding.
func (l *Locks) UnlockAll() error {
	var err error
	if l.target {
		err = l.unlockAll()
	} else {
		err = l.unlockAllGlobal()
	}
	if err != nil {
		return fmt.Errorf("lock: unlock_all: %w", err)
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
