package lock

import (
	"errors"

	"github.com/rmago/rmago/sync/control"
)

// A target's Lock word:
//
//	bit  63     exclusive: some rank holds the exclusive lock
//	bits 48-62  the exclusive holder's rank + 1 (0 while bit 63 is clear,
//	            and for a holder whose rank does not fit), set by the same
//	            compare-and-swap as bit 63, so that a locker that finds the
//	            lock busy can name its holder
//	bits 32-47  marks of lock_all waiters that found an exclusive holder
//	            here: new exclusive lockers wait for them (lockall.go)
//	bits 16-31  exclusive lockers waiting
//	bits  0-15  shared holders, lock_all holders among them (and shared
//	            lockers about to withdraw)
//
// Each count is at most one per rank, and a job locks with atomics only up
// to maxRanks ranks, so 16 bits never overflow.
const (
	countBits    = 16
	sharedMask   = uint64(1)<<countBits - 1
	writerOne    = uint64(1) << countBits
	writerMask   = sharedMask << countBits
	markOne      = uint64(1) << (2 * countBits)
	markMask     = sharedMask << (2 * countBits)
	holderShift  = 3 * countBits
	holderMax    = 1<<(63-holderShift) - 1
	holderMask   = uint64(holderMax) << holderShift
	minusShared  = ^uint64(0)           // -1
	minusWriter  = ^writerOne + 1       // one waiting writer less
	minusMark    = ^markOne + 1         // one mark less
	exclusiveBit = control.ExclusiveBit // adding it clears it when set

	// maxRanks bounds the job size for the lock words' counts.
	maxRanks = int(sharedMask)
)

// taken is what rank me's compare-and-swap adds to a Lock word to take
// the exclusive lock: bit 63 and its rank as the holder (if it fits).
func taken(me int) uint64 {
	if me+1 > holderMax {
		return exclusiveBit
	}
	return exclusiveBit | uint64(me+1)<<holderShift
}

// release is the addend that undoes taken(me): adding bit 63 clears it
// (the carry leaves the word), and the holder field goes back to 0.
func release(me int) uint64 { return -taken(me) }

// holder returns the exclusive holder's rank recorded in Lock word s, -1
// if the exclusive bit is clear, and -2 if the holder's rank did not fit.
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
// Lock_all waiters' marks do not concern it.
func (l *Locks) lockShared(sl *slot, t int, b *backoff) error {
	old, err := sl.add(t, control.Lock, 1)
	if err != nil {
		return err
	}
	return l.settleShared(sl, t, b, old)
}

// sharedBlockers are the bits of a Lock word that keep a shared locker
// out: an exclusive holder or a waiting writer.
const sharedBlockers = exclusiveBit | writerMask

// settleShared takes a shared lock on t whose count this rank added, the
// fetch-and-add having returned old (held at once if old has no
// sharedBlockers).
func (l *Locks) settleShared(sl *slot, t int, b *backoff, old uint64) error {
	for {
		switch {
		case old&sharedBlockers == 0:
			return nil
		case old&writerMask == 0:
			for s := old + 1; s&exclusiveBit != 0; {
				if err := l.pause(b); err != nil {
					return withdraw(busyTarget(err, t, s), sl, t, minusShared)
				}
				var err error
				if s, err = sl.read(t, control.Lock); err != nil {
					return err
				}
			}
			return nil
		}
		if _, err := sl.add(t, control.Lock, minusShared); err != nil {
			return err
		}
		for s := old; s&sharedBlockers != 0; {
			if err := l.pause(b); err != nil {
				return busyTarget(err, t, s)
			}
			var err error
			if s, err = sl.read(t, control.Lock); err != nil {
				return err
			}
		}
		var err error
		if old, err = sl.add(t, control.Lock, 1); err != nil {
			return err
		}
	}
}

// lockExclusive takes an exclusive lock on t: a compare-and-swap of t's
// word from 0 to the exclusive bit and this rank (one round trip
// uncontended); if the word was not 0, it waits at t as a writer.
func (l *Locks) lockExclusive(sl *slot, t int, b *backoff) error {
	old, err := sl.cas(t, control.Lock, 0, taken(l.me))
	if err != nil || old == 0 {
		return err
	}
	return l.waitTarget(sl, t, b)
}

// waitTarget takes the exclusive bit of t: it counts itself as a waiting
// writer (which keeps new shared lockers and lock_all out), waits until no
// lock is held on t and no lock_all waiter has marked it, and swaps the
// bit in. A rank that holds an exclusive lock already does not wait for
// the marks: the lock_all waiter that left them may be waiting for that
// very lock.
func (l *Locks) waitTarget(sl *slot, t int, b *backoff) error {
	old, err := sl.add(t, control.Lock, writerOne)
	if err != nil {
		return err
	}
	s := old + writerOne
	for {
		if s&(exclusiveBit|sharedMask) == 0 && (s&markMask == 0 || l.nexcl.Load() > 0) {
			old, err := sl.cas(t, control.Lock, s, s+minusWriter+taken(l.me))
			if err != nil || old == s {
				return err
			}
			s = old
			continue
		}
		if err := l.pause(b); err != nil {
			return sl.undo(func() error { return withdraw(busyTarget(err, t, s), sl, t, minusWriter) })
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
