package lock

import (
	"sync/atomic"

	"github.com/rmago/rmago/sync/control"
)

// Direct locks. In target mode, a target whose Lock word is mapped into
// this process (shm) is locked and released with one CPU atomic that
// completes at once, with no wait: package rma tries it while it holds
// its window's mutex, and releases the mutex for Lock only when the lock
// is busy. The words and their meaning are target.go's.

// TryDirect takes a lock on target with one CPU atomic if target's Lock
// word is mapped here (target mode) and the lock is free, and reports
// whether it did; false: nothing changed, and Lock takes it (waiting if
// it is busy, and reporting a failed target).
func (l *Locks) TryDirect(target int, exclusive bool) bool {
	p := l.directWord(target)
	if p == nil {
		return false
	}
	if exclusive {
		if !atomic.CompareAndSwapUint64(p, 0, taken(l.me)) {
			return false
		}
		l.nexcl.Add(1)
		return true
	}
	// As lockShared's fetch-and-add when it finds no blocker; with a
	// blocker, Lock's protocol counts itself in and waits.
	s := atomic.LoadUint64(p)
	return s&sharedBlockers == 0 && atomic.CompareAndSwapUint64(p, s, s+1)
}

// UnlockDirect releases this rank's lock on target, taken exclusive or
// not, with one CPU atomic if target's Lock word is mapped here (target
// mode), and reports whether it did; false: nothing changed, and Unlock
// releases it. The caller has completed every operation it issued to
// target.
func (l *Locks) UnlockDirect(target int, exclusive bool) bool {
	p := l.directWord(target)
	if p == nil {
		return false
	}
	v := minusShared
	if exclusive {
		v = release(l.me)
		l.nexcl.Add(-1)
	}
	atomic.AddUint64(p, v)
	return true
}

// directWord is target's Lock word mapped here, or nil: leader mode (an
// exclusive lock also takes the leader's Global word), a job too large
// for the words, a target reached through requests, or one whose queue
// pair has failed (Lock and Unlock report it).
func (l *Locks) directWord(target int) *uint64 {
	if !l.target || l.size > maxRanks {
		return nil
	}
	words := l.c.Direct(target)
	if words == nil || l.f.DirectReady(target) != nil {
		return nil
	}
	return &words[control.Lock]
}
