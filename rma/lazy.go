package rma

import (
	"time"

	"github.com/rmago/rmago/sync/lock"
	"github.com/rmago/rmago/transport"
)

// Lazy locks (sync/lock's lazy.go, docs/sync-protocols.md). Where the
// target's provider takes guarded writes (soft), Lock(target, Shared), and
// Lock(target, Exclusive) if this rank or the target is the lock leader,
// send nothing and return; the epoch is open. The epoch's first operation,
// if it is a Put or Get of at most transport.MaxGuardedWrite bytes from or
// to registered memory, carries the lock's atomics: they and the put go as
// one chain, and the target executes the put only if they found the lock
// free (a get it runs anyway: it changes nothing there). Anything else to
// the target first confirms the lock (waits for the atomics' answers, or
// sends them and waits, as Lock would, and takes the slow way if the lock
// was not free, making the put or get again once it is held): an
// accumulate or atomic, a second Put or Get, Flush, Unlock.
// Unlock of a lazy lock that sent nothing sends nothing: no operation,
// nothing held. Lock, Put and Flush so take one round trip, not two.
//
// The window's state machine sees an open epoch throughout;
// win.lazy[t] says it is not yet confirmed. One goroutine confirms at a
// time; others wait for it (waitChange). If the confirmation fails, the
// error stays with the epoch: every later call on the target returns it,
// and Unlock closes the epoch with it.

// lazyLock is a lock on one target taken lazily.
type lazyLock struct {
	p          lock.Pending
	confirming bool  // a goroutine confirms it; others wait
	err        error // the confirmation (or the put carrying the atomics) failed

	// The put or get that carried the atomics, to make again if the lock
	// was not free (a put's origin is not modified before the epoch ends,
	// nor a get's read before it: their contracts).
	put    bool // a put or get went
	read   bool // it was a get
	local  transport.Local
	remote transport.Remote
	n      uint32
}

// lazyAt is the unconfirmed lazy lock on target, or nil; win.mu held.
func (win *Window[T]) lazyAt(target int) *lazyLock {
	if target < 0 || target >= len(win.lazy) {
		return nil
	}
	return win.lazy[target]
}

// settleLazy returns once target's lock is not an unconfirmed lazy one,
// having confirmed it (without win.mu) or waited for the goroutine that
// does; with unsentOK, also for a lazy lock that has sent nothing yet (a
// put may carry it, a Flush has nothing to complete). win.mu held
// throughout, released meanwhile; on error too.
func (win *Window[T]) settleLazy(target int, unsentOK bool) error {
	var deadline time.Time
	for {
		lz := win.lazyAt(target)
		switch {
		case lz == nil:
			return nil
		case lz.err != nil:
			return lz.err
		case lz.confirming:
			if err := win.waitChange(&deadline); err != nil {
				return win.wrapf(err, "waiting for another goroutine to confirm the lock on rank %d", target)
			}
			continue
		case unsentOK && !lz.p.Sent():
			return nil
		}
		lz.confirming = true
		win.mu.Unlock()
		err := win.confirmLazy(target, lz)
		win.mu.Lock()
		lz.confirming = false
		if err != nil {
			lz.err = win.wrapf(err, "Lock(%d), confirmed at the epoch's first use", target)
		} else {
			win.lazy[target] = nil
		}
		win.changedState()
	}
}

// confirmLazy takes lz's lock for good and, if the put that carried its
// atomics was skipped, posts it again; without win.mu.
func (win *Window[T]) confirmLazy(target int, lz *lazyLock) error {
	skipped, err := win.locks.Confirm(&lz.p)
	switch {
	case err != nil || !skipped || !lz.put:
	case lz.read:
		_, err = win.w.f.Read(target, lz.local, lz.remote, lz.n)
	default:
		_, err = win.w.f.Write(target, lz.local, lz.remote, lz.n)
	}
	return err
}

// carryLock sends lz's atomics with a put of n bytes from the registered
// origin at local to remote (read: a get from remote into local), and
// reports whether it did; win.mu held. Not sent: the caller confirms the
// lock first, then goes on as usual.
func (win *Window[T]) carryLock(lz *lazyLock, target int, read bool, local transport.Local, remote transport.Remote, n int) (bool, error) {
	with := win.locks.WithWrite
	if read {
		with = win.locks.WithRead
	}
	sent, err := with(&lz.p, local, remote, uint32(n))
	if err != nil {
		lz.err = win.wrapf(err, "Lock(%d), sent with the epoch's first put", target)
		win.changedState()
		return false, lz.err
	}
	if sent {
		lz.put, lz.read, lz.local, lz.remote, lz.n = true, read, local, remote, uint32(n)
	}
	return sent, nil
}

// unlockLazy is Unlock of a lazy lock (win.lazyAt(target) != nil); win.mu
// held. One that sent nothing took nothing: the epoch closes without a
// message. One that sent its atomics is confirmed first, then released as
// any lock; one whose confirmation failed closes with the error.
func (win *Window[T]) unlockLazy(target int) error {
	err := win.settleLazy(target, true)
	lz := win.lazyAt(target)
	if lz == nil {
		return win.unlockHeld(target) // confirmed: release it
	}
	tr := transition{kind: kindUnlock, target: target}
	if e := win.enter(&tr); e != nil {
		return e
	}
	win.lazy[target] = nil
	win.leave(&tr, err == nil)
	win.ops = win.ep.nlocks > 0 && win.ops
	if err != nil {
		return win.wrapf(err, "Unlock(%d)", target)
	}
	return nil
}
