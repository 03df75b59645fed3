// Package lock is the passive-target lock protocol of rmago windows
// (MPI_Win_lock, MPI_Win_unlock, MPI_Win_lock_all, MPI_Win_unlock_all),
// built only on remote atomics on the window's control region: the target's
// CPU takes no part.
//
// # Words
//
// Two levels of 8-byte words of the control region (package sync/control):
//
//   - every rank's Lock word: bit 63 (control.ExclusiveBit) is set while
//     some rank holds the exclusive lock on that rank; the low 32 bits count
//     shared holders (and shared lockers that are about to back off);
//   - the leader's (rank 0's) Global word: the low 32 bits count lock_all
//     holders, the high 32 bits exclusive locks held, or being acquired, on
//     any rank.
//
// A lock_all holder is a shared holder of every rank without touching any of
// them: exclusive lockers meet it at the leader instead.
//
// # Protocol
//
//   - Shared lock on T: fetch-add T.Lock += 1. If the old value had the
//     exclusive bit, add -1 back and retry after a backoff.
//   - Exclusive lock on T: fetch-add leader.Global += 1<<32 and, at the same
//     time (both posted before either is awaited, one round trip),
//     compare-and-swap T.Lock from 0 to the exclusive bit. The lock is
//     taken if no lock_all holder was counted (low half of the old Global
//     zero) and the swap succeeded; otherwise whichever of the two
//     succeeded is undone (Global -= 1<<32; T.Lock -= exclusive bit, an
//     addition so that shared lockers' passing increments survive), and the
//     attempt is retried after a backoff.
//   - lock_all: fetch-add leader.Global += 1. If the old value's high half
//     is not zero (an exclusive lock is held or being taken somewhere), add
//     -1 back and retry after a backoff.
//   - Unlocks are the matching additions: shared T.Lock -= 1; exclusive
//     T.Lock -= exclusive bit and leader.Global -= 1<<32 (both posted, then
//     both awaited); lock_all leader.Global -= 1. Negative addends are
//     two's complement.
//
// Mutual exclusion follows from the atomics' total order on each word: of an
// exclusive locker and a lock_all locker, the later increment of Global sees
// the earlier one; of an exclusive and a shared locker of T, the swap fails
// on a counted shared holder and the shared locker sees the exclusive bit.
//
// # Costs
//
// Uncontended, in remote atomics and round trips (an atomic to oneself goes
// through the loopback queue pair and costs the same):
//
//	Lock shared     1 atomic,  1 round trip
//	Lock exclusive  2 atomics, 1 round trip
//	LockAll         1 atomic,  1 round trip (whatever the job size)
//	Unlock shared   1 atomic,  1 round trip
//	Unlock excl.    2 atomics, 1 round trip
//	UnlockAll       1 atomic,  1 round trip
//
// A failed attempt costs one more atomic per increment it undoes (the undo
// is awaited, so that the result word can be reused) plus the backoff.
// Every atomic is a signalled request awaited with the fabric's Wait: no
// extra flush request is needed to learn its completion.
//
// # Fairness and backoff
//
// The lock is not fair and not FIFO: there is no queue, only retries.
//   - A steady stream of shared lockers of T can starve an exclusive locker
//     of T: the swap needs T.Lock to be exactly zero, which ranks reading in
//     a tight loop may never leave it (seen in tests: seven readers
//     re-locking within 0.2 ms of each unlock kept a writer out for ~15 s
//     on one CPU).
//   - Likewise a steady stream of lock_all holders starves exclusive
//     lockers everywhere, and a steady stream of exclusive lockers (on any
//     ranks) starves lock_all.
//   - Contenders that keep colliding (an exclusive and a lock_all locker
//     each counting the other) can in principle retry forever, but the
//     jittered backoff makes repeated collisions geometrically unlikely.
//
// A failed attempt waits before the next: about 1 µs at first, doubling up
// to about 1 ms, each wait drawn uniformly from [d/2, d] (jitter). Waits
// under 50 µs yield the processor (runtime.Gosched) until they have passed;
// longer ones sleep (Go's timers usually stretch them to about 1 ms). So a
// contended word sees at most one attempt per round trip plus backoff from
// each waiter, about one per millisecond after the first ten tries: no
// waiter ever spins on a remote word. What the backoff does not give is a
// bound on the number of attempts: a waiter that keeps losing waits until
// the fabric's timeout (transport.Fabric.Timeout; RMAGO_TIMEOUT) and fails
// with an error wrapping transport.ErrTimeout.
//
// # Failures
//
// An atomic to a failed rank fails at once with that connection's error. A
// waiting Lock or LockAll also gives up as soon as any of this rank's
// connections has failed: the lock words do not say who holds a lock, so
// the dead rank may be the holder. Otherwise a wait is bounded by the
// fabric's timeout. After a fabric error the lock words may keep an
// increment of this rank's (the job is expected to end, as MPI's errors
// are fatal by default).
//
// # What the caller does
//
// Before Unlock or UnlockAll the caller completes (flushes) every operation
// it issued under the lock, so that the next holder sees its puts and it
// has finished reading. The release atomic also travels behind every
// request this rank posted to T on the same queue pair and is executed
// after them; Unlock returns once the release has completed.
//
// # NoCheck
//
// LockNoCheck and LockAllNoCheck (MPI_MODE_NOCHECK) record the epoch
// without any atomic: the program guarantees that no other rank holds or
// requests a conflicting lock meanwhile. The matching Unlock or UnlockAll
// then skips its atomics as well.
//
// # Concurrency
//
// A Locks may be used by several goroutines: its state and the result
// words are guarded by a mutex that is released while a caller backs off.
// Locks uses the control region's result words control.Scratch+0 and
// control.Scratch+1; other users of the region must keep off them.
package lock

import (
	"errors"
	"fmt"
	"sync"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// Misuse errors, errors.Is-able. They leave the state unchanged.
var (
	// ErrLocked: a lock on this target (or lock_all) is already held,
	// being acquired or being released by this rank, or a lock and
	// lock_all are mixed.
	ErrLocked = errors.New("lock: already locked by this rank")
	// ErrNotLocked: unlock of a lock this rank does not hold (or holds in
	// the other mode).
	ErrNotLocked = errors.New("lock: not locked by this rank")
	// ErrRank: the target rank is out of range.
	ErrRank = errors.New("lock: rank out of range")
	// ErrJobSize: the job has more ranks than the Global word can count
	// (maxClass).
	ErrJobSize = errors.New("lock: job too large for the lock words")
)

// Leader is the rank whose Global word arbitrates between exclusive locks
// and lock_all.
const Leader = 0

// Per-target state.
const (
	stNone uint8 = iota
	stAcquiring
	stShared
	stExclusive
	stReleasing
	stMode    = 0x0f
	stNoCheck = 0x80 // taken without atomics: released without them
)

// Locks is one window's passive-target lock state on this rank.
type Locks struct {
	c    *control.Region
	f    *transport.Fabric
	size int

	mu    sync.Mutex // guards state, all and nheld; never held across a remote wait
	state []uint8    // per target
	all   uint8      // lock_all
	nheld int        // targets not in stNone

	slots []slot // per target, then lock_all's
}

// New returns the lock protocol of the window whose control region is c.
// It is local (not collective) and takes no lock.
func New(c *control.Region) *Locks {
	n := c.F.Size()
	l := &Locks{c: c, f: c.F, size: n, state: make([]uint8, n), slots: make([]slot, n+1)}
	for t := range l.slots {
		l.slots[t] = slot{l: l, word: control.LockResult(n, t)}
	}
	return l
}

// Lock takes a shared or exclusive lock on rank target's window, waiting
// (with backoff, bounded by the fabric's timeout) while a conflicting lock
// is held.
func (l *Locks) Lock(target int, exclusive bool) error {
	return l.lock(target, exclusive, false)
}

// LockNoCheck records a lock on target without taking it
// (MPI_MODE_NOCHECK): the program guarantees that no other rank holds or
// requests a conflicting lock until the matching Unlock, which then skips
// its atomics too. It fails like Lock on misuse.
func (l *Locks) LockNoCheck(target int, exclusive bool) error {
	return l.lock(target, exclusive, true)
}

// LockAll takes a shared lock on every rank's window (MPI_Win_lock_all)
// with one atomic at the leader, waiting while exclusive locks are held
// (or, for fairness, waited for) anywhere.
func (l *Locks) LockAll() error { return l.lockAll(false) }

// LockAllNoCheck records lock_all without taking it (MPI_MODE_NOCHECK):
// the program guarantees that no exclusive lock is held or requested
// meanwhile. The matching UnlockAll skips its atomic too.
func (l *Locks) LockAllNoCheck() error { return l.lockAll(true) }

func (l *Locks) lock(target int, exclusive, noCheck bool) error {
	if target < 0 || target >= l.size {
		return fmt.Errorf("%w: lock of rank %d in a job of %d", ErrRank, target, l.size)
	}
	if l.size > maxClass {
		return fmt.Errorf("%w: %d ranks, at most %d", ErrJobSize, l.size, maxClass)
	}
	mode := stShared
	if exclusive {
		mode = stExclusive
	}
	l.mu.Lock()
	switch {
	case l.all != stNone:
		l.mu.Unlock()
		return fmt.Errorf("%w: lock of rank %d while lock_all is held", ErrLocked, target)
	case l.state[target] != stNone:
		l.mu.Unlock()
		return fmt.Errorf("%w: rank %d", ErrLocked, target)
	}
	l.nheld++
	if noCheck {
		l.state[target] = mode | stNoCheck
		l.mu.Unlock()
		return nil
	}
	l.state[target] = stAcquiring
	l.mu.Unlock()

	// The target's slot is this call's alone while the state says
	// stAcquiring.
	var b backoff
	b.reset(l.f.Timeout())
	var err error
	if exclusive {
		err = l.lockExclusive(&l.slots[target], target, &b)
	} else {
		err = l.lockShared(&l.slots[target], target, &b)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.state[target] = stNone
		l.nheld--
		return fmt.Errorf("lock: %s lock on rank %d: %w", modeName(exclusive), target, err)
	}
	l.state[target] = mode
	return nil
}

func (l *Locks) lockAll(noCheck bool) error {
	if l.size > maxClass {
		return fmt.Errorf("%w: %d ranks, at most %d", ErrJobSize, l.size, maxClass)
	}
	l.mu.Lock()
	switch {
	case l.all != stNone:
		l.mu.Unlock()
		return fmt.Errorf("%w: lock_all is already held", ErrLocked)
	case l.nheld > 0:
		l.mu.Unlock()
		return fmt.Errorf("%w: lock_all while %d lock(s) are held", ErrLocked, l.nheld)
	}
	if noCheck {
		l.all = stShared | stNoCheck
		l.mu.Unlock()
		return nil
	}
	l.all = stAcquiring
	l.mu.Unlock()

	var b backoff
	b.reset(l.f.Timeout())
	sl := &l.slots[l.size]
	old, err := sl.add(Leader, control.Global, classAll.one())
	if err == nil {
		err = l.enterGlobal(sl, classAll, old, &b, -1)
	}

	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.all = stNone
		return fmt.Errorf("lock: lock_all: %w", err)
	}
	l.all = stShared
	return nil
}

// pause backs off once while a lock is busy. It fails when the deadline
// has passed or a connection of this rank has failed (target < 0:
// lock_all).
func (l *Locks) pause(b *backoff, target int) error {
	for r := range l.size {
		if err := l.f.Err(r); err != nil {
			return fmt.Errorf("rank %d failed while the lock was busy (it may be the holder): %w", r, err)
		}
	}
	if !b.pause() {
		return fmt.Errorf("%w after %v (the lock stayed busy)", transport.ErrTimeout, l.f.Timeout())
	}
	return nil
}

// Unlock releases this rank's lock on target; exclusive must match the
// mode it was taken in. The caller has completed the operations it issued
// under the lock; the release is ordered after every request this rank
// posted to target and has completed when Unlock returns.
func (l *Locks) Unlock(target int, exclusive bool) error {
	if target < 0 || target >= l.size {
		return fmt.Errorf("%w: unlock of rank %d in a job of %d", ErrRank, target, l.size)
	}
	mode := stShared
	if exclusive {
		mode = stExclusive
	}
	l.mu.Lock()
	st := l.state[target]
	switch {
	case st&stMode != stShared && st&stMode != stExclusive:
		l.mu.Unlock()
		return fmt.Errorf("%w: rank %d", ErrNotLocked, target)
	case st&stMode != mode:
		l.mu.Unlock()
		return fmt.Errorf("%w: rank %d is locked %s, not %s", ErrNotLocked, target,
			modeName(st&stMode == stExclusive), modeName(exclusive))
	}
	if st&stNoCheck != 0 {
		l.state[target] = stNone
		l.nheld--
		l.mu.Unlock()
		return nil
	}
	l.state[target] = stReleasing
	l.mu.Unlock()

	sl := &l.slots[target]
	var err error
	if exclusive {
		var oldG uint64
		_, oldG, err = sl.add2(target, control.Lock, exclusiveBit, Leader, control.Global, classExcl.minusOne())
		if err == nil {
			err = l.handOver(sl, classExcl, oldG)
		}
	} else {
		_, err = sl.add(target, control.Lock, minusShared)
	}

	l.mu.Lock()
	l.state[target] = stNone
	l.nheld--
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("lock: unlock of rank %d: %w", target, err)
	}
	return nil
}

// UnlockAll releases lock_all. The caller has completed the operations it
// issued under it.
func (l *Locks) UnlockAll() error {
	l.mu.Lock()
	st := l.all
	if st&stMode != stShared {
		l.mu.Unlock()
		return fmt.Errorf("%w: lock_all", ErrNotLocked)
	}
	if st&stNoCheck != 0 {
		l.all = stNone
		l.mu.Unlock()
		return nil
	}
	l.all = stReleasing
	l.mu.Unlock()

	err := l.releaseGlobal(&l.slots[l.size], classAll)

	l.mu.Lock()
	l.all = stNone
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("lock: unlock_all: %w", err)
	}
	return nil
}

// Held reports the lock this rank holds on target: held, and whether it is
// exclusive. Locks recorded with LockNoCheck count. A lock being acquired
// or released is not held.
func (l *Locks) Held(target int) (held, exclusive bool) {
	if target < 0 || target >= l.size {
		return false, false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.state[target] & stMode
	return m == stShared || m == stExclusive, m == stExclusive
}

// HeldAll reports whether this rank holds lock_all.
func (l *Locks) HeldAll() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.all&stMode == stShared
}

func modeName(exclusive bool) string {
	if exclusive {
		return "exclusive"
	}
	return "shared"
}
