package lock

import (
	"errors"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// A target's Lock word:
//
//	bit  63     exclusive: some rank holds the exclusive lock
//	bits 40-62  the exclusive holder's rank + 1 (0 while bit 63 is clear),
//	            set by the same compare-and-swap as bit 63, so that a
//	            locker that finds the lock busy can name its holder
//	bits 20-39  exclusive lockers waiting (they hold the Global word's
//	            exclusive side already)
//	bits  0-19  shared holders (and shared lockers about to withdraw)
//
// Each count is at most one per rank and target, and a job locks with
// atomics only up to maxClass ranks, so 20 bits never overflow.
const (
	countBits    = 20
	sharedMask   = uint64(1)<<countBits - 1
	writerOne    = uint64(1) << countBits
	writerMask   = sharedMask << countBits
	holderShift  = 2 * countBits
	holderMask   = (uint64(1)<<(63-holderShift) - 1) << holderShift
	minusShared  = ^uint64(0)           // -1
	minusWriter  = ^writerOne + 1       // one waiting writer less
	exclusiveBit = control.ExclusiveBit // adding it clears it when set
)

// taken is what rank me's compare-and-swap adds to a Lock word to take
// the exclusive lock: bit 63 and its rank as the holder.
func taken(me int) uint64 { return exclusiveBit | uint64(me+1)<<holderShift }

// release is the addend that undoes taken(me): adding bit 63 clears it
// (the carry leaves the word), and the holder field goes back to 0.
func release(me int) uint64 { return exclusiveBit - uint64(me+1)<<holderShift }

// holder returns the exclusive holder's rank recorded in Lock word s, or
// -1 if the exclusive bit is clear.
func holder(s uint64) int {
	if s&exclusiveBit == 0 {
		return -1
	}
	return int(s&holderMask>>holderShift) - 1
}

// lockShared takes a shared lock on t. A waiting writer goes first: a
// shared locker that finds one withdraws and waits until no writer waits
// or holds. A shared locker that finds only a holder keeps its count,
// which keeps new writers out, and waits for the holder to leave.
func (l *Locks) lockShared(sl *slot, t int, b *backoff) error {
	for {
		old, err := sl.add(t, control.Lock, 1)
		if err != nil {
			return err
		}
		switch {
		case old&(exclusiveBit|writerMask) == 0:
			return nil
		case old&writerMask == 0:
			for s := old + 1; s&exclusiveBit != 0; {
				if err := l.pause(b, t); err != nil {
					return withdraw(busyTarget(err, t, s), sl, t, minusShared)
				}
				if s, err = sl.read(t, control.Lock); err != nil {
					return err
				}
			}
			return nil
		}
		if _, err := sl.add(t, control.Lock, minusShared); err != nil {
			return err
		}
		for s := old; s&(exclusiveBit|writerMask) != 0; {
			if err := l.pause(b, t); err != nil {
				return busyTarget(err, t, s)
			}
			if s, err = sl.read(t, control.Lock); err != nil {
				return err
			}
		}
	}
}

// lockExclusive takes an exclusive lock on t. It posts its arrival at the
// leader's Global word and a compare-and-swap of t's word from 0 to the
// exclusive bit together (one round trip uncontended). If lock_all holds
// or waits, it gives the target back and waits at the Global word first;
// then, if the target was not free, it waits at the target as a writer.
//
// joined: this rank already holds an exclusive lock and Lock (under its
// mutex) posted the Global arrival as seqG; it is admitted whatever the
// word says.
func (l *Locks) lockExclusive(sl *slot, t int, b *backoff, joined bool, seqG uint64) error {
	var err error
	cas := req{t, control.Lock, transport.CompareSwapOp, 0, taken(l.me), 1}
	var seqT uint64
	var errT error
	if joined {
		seqT, errT = sl.post(cas.r, cas.w, cas.op, cas.a, cas.b, cas.k)
	} else {
		var errG error
		seqG, errG, seqT, errT = sl.postPair(req{Leader, control.Global, transport.FetchAddOp, classExcl.one(), 0, 0}, cas)
		if errG != nil {
			return errG
		}
	}
	if err := l.f.Await(Leader, seqG); err != nil {
		return err
	}
	oldG := sl.result(0)
	if errT == nil {
		errT = l.f.Await(t, seqT)
	}
	if errT != nil {
		if t == Leader {
			// The release would queue behind the failed request on the
			// same queue pair and wait out a second timeout.
			return errT
		}
		return errors.Join(errT, l.releaseGlobal(sl, classExcl))
	}
	gotT := sl.result(1) == 0
	if !joined && !classExcl.admits(oldG) {
		// Hold nothing while waiting for lock_all's phase to end: a
		// reserved target would keep its other lockers waiting on us, and
		// admitted writers of it would keep lock_all (and us) waiting.
		if gotT {
			oldG, _, err = sl.add2(Leader, control.Global, classExcl.toWait(), t, control.Lock, release(l.me))
			gotT = false
		} else {
			oldG, err = sl.add(Leader, control.Global, classExcl.toWait())
		}
		if err != nil {
			return err
		}
		if err := l.waitGlobal(sl, classExcl, oldG+classExcl.toWait(), b, t); err != nil {
			return err
		}
	}
	if gotT {
		return nil
	}
	if err := l.waitTarget(sl, t, b); err != nil {
		if t == Leader && !errors.Is(err, errBusy) {
			return err // an atomic to the leader failed: see above
		}
		if errors.Is(err, errBusy) {
			return errors.Join(err, sl.undo(func() error { return l.releaseGlobal(sl, classExcl) }))
		}
		return errors.Join(err, l.releaseGlobal(sl, classExcl))
	}
	return nil
}

// waitTarget takes the exclusive bit of t for a holder of the Global
// word's exclusive side: it counts itself as a waiting writer (which
// keeps new shared lockers out), waits until no lock is held on t, and
// swaps the bit in.
func (l *Locks) waitTarget(sl *slot, t int, b *backoff) error {
	old, err := sl.add(t, control.Lock, writerOne)
	if err != nil {
		return err
	}
	s := old + writerOne
	for {
		if s&(exclusiveBit|sharedMask) == 0 {
			old, err := sl.cas(t, control.Lock, s, s+minusWriter+taken(l.me))
			if err != nil || old == s {
				return err
			}
			s = old
			continue
		}
		if err := l.pause(b, t); err != nil {
			return withdraw(busyTarget(err, t, s), sl, t, minusWriter)
		}
		if s, err = sl.read(t, control.Lock); err != nil {
			return err
		}
	}
}

// withdraw undoes a waiter's count on t's word (adds v) after err.
func withdraw(err error, sl *slot, t int, v uint64) error {
	if _, uerr := sl.add(t, control.Lock, v); uerr != nil {
		return errors.Join(err, uerr)
	}
	return err
}
