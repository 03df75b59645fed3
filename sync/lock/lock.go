// Package lock is the passive-target lock protocol of rmago windows
// (MPI_Win_lock, MPI_Win_unlock, MPI_Win_lock_all, MPI_Win_unlock_all),
// built only on remote atomics on the window's control region: the target's
// CPU takes no part.
//
// # Words
//
// Two levels of 8-byte words of the control region (package sync/control),
// after foMPI's design:
//
//   - every rank's Lock word (target.go): bit 63 (control.ExclusiveBit) is
//     set while some rank holds the exclusive lock on that rank, and bits
//     40-62 then hold the holder's rank + 1 (set by the same
//     compare-and-swap, so that a waiter can name it); bits 20-39 count
//     exclusive lockers waiting for it; bits 0-19 count shared holders
//     (and shared lockers about to withdraw);
//   - the leader's (rank 0's) Global word (global.go) keeps lock_all and
//     exclusive locks apart: for each of the two classes it counts holders
//     and waiters, and keeps a generation; a turn bit settles ties.
//
// A lock_all holder is a shared holder of every rank without touching any of
// them: exclusive lockers meet it at the leader instead. Shared locks touch
// only their target; exclusive locks of different targets meet only at the
// leader's word, where they share (one fetch-add each), and never wait for
// each other there.
//
// # Protocol
//
// The Global word is a two-class phase lock. An arrival of class C
// (lock_all, or an exclusive locker) adds one C holder. It holds at once if
// the other class O neither held nor waited; otherwise it turns itself
// into a C waiter (one more fetch-add) and waits. Waiters never add and
// undo increments in a loop (which made the two classes fail each other's
// attempts: the old protocol's cliff); they read the word (a fetch-add of
// zero) with backoff, and when its state allows C in, one of them moves
// every C waiter to the holders with one compare-and-swap, advancing C's
// generation, which is how the others learn they hold. C's waiters may
// convert when O holds nothing and either C is in its phase (holds) and O
// does not wait, or nobody holds and O does not wait or C has the turn; a
// conversion gives the turn to O. The last holder of a phase hands over to
// the other class's waiters (one compare-and-swap) when it releases, so
// they need not wait for their next look.
//
// Hence phases alternate: an arrival that finds the other class waiting
// waits behind it, so a waiter of O sees at most the running C phase and
// one more (a tie the turn gave to C) before its own: neither lock_all nor
// exclusive lockers starve. One exception keeps a rank that holds an
// exclusive lock and asks for another from deadlocking behind a lock_all
// waiter (which waits for the first lock): being an exclusive holder
// already, it is admitted at once (its arrival is posted under the mutex,
// so that on the queue pair to the leader it precedes the release of the
// lock it holds).
//
//   - Shared lock on T: fetch-add T.Lock += 1. If no writer holds or waits,
//     held. If a writer holds but none waits, keep the count (new writers
//     now wait for it) and read T.Lock until the exclusive bit is clear.
//     If a writer waits, writers go first: add -1 back, read until no
//     writer holds or waits, and start again.
//   - Exclusive lock on T: fetch-add an exclusive arrival at the Global word
//     and, posted together (one round trip), compare-and-swap T.Lock from 0
//     to the exclusive bit. Held if both succeeded. If lock_all holds or
//     waits, give T back (if the swap took it) and wait at the Global word
//     as an exclusive waiter. Once the Global word is held and if T was not
//     free, count itself a waiting writer at T (which keeps new shared
//     lockers out), read T.Lock until no lock is held there, and swap the
//     exclusive bit in (uncounting itself in the same swap).
//   - lock_all: a lock_all arrival at the Global word, then as above.
//   - Unlocks are the matching additions: shared T.Lock -= 1; exclusive
//     T.Lock -= exclusive bit and one exclusive holder less at the Global
//     word (both posted, then both awaited); lock_all one lock_all holder
//     less. Negative addends are two's complement. The last holder of a
//     phase may add a hand-over compare-and-swap.
//
// Mutual exclusion: of the Global word's classes, a holder is counted
// from its admission to its release, and an arrival or a conversion of
// one class requires that the other class count no holder in the same
// atomic's value. At T, the exclusive bit is set only by a swap from a
// value with no shared count and no exclusive bit, and a shared locker
// holds only if its increment found no exclusive bit, or waits until the
// bit is clear, keeping its count, which keeps any later swap from
// succeeding.
//
// # Costs
//
// Uncontended, in remote atomics and round trips (an atomic to oneself goes
// through the loopback queue pair and costs the same), as before:
//
//	Lock shared     1 atomic,  1 round trip
//	Lock exclusive  2 atomics, 1 round trip
//	LockAll         1 atomic,  1 round trip (whatever the job size)
//	Unlock shared   1 atomic,  1 round trip
//	Unlock excl.    2 atomics, 1 round trip
//	UnlockAll       1 atomic,  1 round trip
//
// Contended, a locker that must wait costs 1 more atomic to become a
// waiter (2 for an exclusive locker whose swap had taken T), one read per
// look while it waits, and at most one compare-and-swap per change of the
// word it waits on; a writer waiting at T adds 1 atomic to count itself.
// Every atomic is a signalled request awaited with the fabric's Wait: no
// extra flush request is needed to learn its completion.
//
// # Backoff
//
// A waiter looks again after a pause: about 1 µs at first, doubling up to
// about 1 ms, each drawn uniformly from [d/2, d] (jitter). Pauses under
// 50 µs yield the processor (runtime.Gosched) until they have passed;
// longer ones sleep. A look is a read, which changes nothing, so many
// waiters looking do not make each other fail. A wait is bounded by the
// fabric's timeout (transport.Fabric.Timeout; RMAGO_TIMEOUT): then the
// waiter withdraws (uncounts itself) and fails with an error wrapping
// transport.ErrTimeout.
//
// # Limits and caveats
//
// The Global word counts at most 8191 (maxClass) of each: lock_all
// holders and waiters (ranks; a larger job fails with ErrJobSize), and
// exclusive locks held or being taken at once over the job (at most one
// per rank and target, so a job of up to 90 ranks cannot exceed it).
// Writers go first at a target: a steady stream of exclusive lockers of
// one target can starve its shared lockers, and, as with any
// writer-preferring lock, a program that holds one lock while requesting
// another can deadlock where a reader-preferring lock would not.
//
// # Failures
//
// An atomic to a failed rank fails at once with that connection's error. A
// waiting Lock or LockAll also gives up as soon as any of this rank's
// connections has failed: the lock words do not say who holds a shared
// lock or lock_all, so the dead rank may be the holder. A wait that times
// out names what the word it waited on showed at its last look: the
// exclusive holder's rank (a target's word records it), or the counts of
// shared, lock_all and exclusive holders and waiters. After a fabric error the lock words may
// keep a count of this rank's (the job is expected to end, as MPI's errors
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
// A Locks may be used by several goroutines, on different targets at once:
// its mutex guards only the per-target states and is never held across a
// remote wait. Each target (and lock_all) has its own pair of result words
// (control.LockResult) and work request, used by one call at a time: a
// second call on a target that is being locked, is held or is being
// released by this rank fails with ErrLocked.
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

// errBusy marks a wait that timed out while the lock words still
// answered (the lock stayed busy), as opposed to an atomic that did not
// complete.
var errBusy = errors.New("the lock stayed busy")

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
	me   int
	size int

	mu    sync.Mutex // guards state, all, nheld and nexcl; never held across a remote wait
	state []uint8    // per target
	all   uint8      // lock_all
	nheld int        // targets not in stNone
	// nexcl counts this rank's exclusive locks held with atomics, each an
	// exclusive holder at the Global word. While it is not zero, another
	// exclusive lock is admitted there at once (see lock).
	nexcl int

	slots []slot // per target, then lock_all's
}

// New returns the lock protocol of the window whose control region is c.
// It is local (not collective) and takes no lock.
func New(c *control.Region) *Locks {
	n := c.F.Size()
	l := &Locks{c: c, f: c.F, me: c.F.Rank(), size: n, state: make([]uint8, n), slots: make([]slot, n+1)}
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
	if l.size > maxClass && !noCheck {
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
	// The target's slot is this call's alone while the state says
	// stAcquiring.
	sl := &l.slots[target]
	// A rank that already holds an exclusive lock is an exclusive holder
	// at the Global word: a second exclusive lock joins it there without
	// waiting, since lock_all cannot be held meanwhile. (Waiting behind a
	// lock_all waiter would deadlock: it waits for the first lock's
	// release.) Posting the arrival under the mutex orders it, on the
	// queue pair to the leader, before the release of any lock this rank
	// holds, which Unlock posts under the mutex as well.
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

	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.state[target] = stNone
		l.nheld--
		return fmt.Errorf("lock: %s lock on rank %d: %w", modeName(exclusive), target, err)
	}
	l.state[target] = mode
	if exclusive {
		l.nexcl++
	}
	return nil
}

func (l *Locks) lockAll(noCheck bool) error {
	if l.size > maxClass && !noCheck {
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
		return fmt.Errorf("%w after %v (%w)", transport.ErrTimeout, l.f.Timeout(), errBusy)
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
	sl := &l.slots[target]
	var err error
	if !exclusive {
		l.mu.Unlock()
		_, err = sl.add(target, control.Lock, minusShared)
	} else {
		// Posted under the mutex: see lock.
		l.nexcl--
		var seqT, seqG uint64
		var errG error
		seqT, err = sl.post(target, control.Lock, transport.FetchAddOp, release(l.me), 0, 0)
		if err == nil {
			seqG, errG = sl.post(Leader, control.Global, transport.FetchAddOp, classExcl.minusOne(), 0, 1)
		}
		l.mu.Unlock()
		if err == nil {
			err = l.f.Wait(target, seqT)
			// With target the leader, the Global release is queued behind
			// the failed one: waiting for it would wait out a second
			// timeout.
			if errG == nil && (err == nil || target != Leader) {
				if errG = l.f.Wait(Leader, seqG); errG == nil {
					errG = l.handOver(sl, classExcl, sl.result(1))
				}
			}
			err = errors.Join(err, errG)
		}
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
