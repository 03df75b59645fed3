package rma

import (
	"fmt"
	"time"

	"github.com/rmago/rmago/transport"
)

// epochs is a window's synchronization state, a small state machine: which
// access epochs are open (fence, lock per target, lock_all, PSCW access to a
// group) and whether a PSCW exposure epoch is open. Operations need an
// access epoch to their target; synchronization calls that do not fit the
// state fail with an errors.Is-able error and change nothing.
//
// Epochs belong to the window (to the rank, as in MPI), not to the
// goroutine that opened them. Window.mu guards the state and is held only
// for a transition, never while a call waits for a peer: a call that must
// wait (Lock for the remote lock, Start for the posts, Wait for the
// completions, Unlock and Complete for their atomics, Fence for the
// others) first moves its part of the state to a transitional value
// (locking, unlocking, opening, closing, fence running), releases the
// mutex, waits, and takes the mutex again to finish the transition. Other
// goroutines meanwhile see a consistent state: operations to a target
// whose lock is being taken or released are refused (ErrNoEpoch), and a
// conflicting synchronization call on the same part (a second Lock of a
// target this rank locks or holds, a Start while an access epoch is open)
// waits, without the mutex, until that part is free again (waitChange).
type epochs struct {
	fence    uint8   // fenceNone, fenceOpen, fenceRunning
	lockAll  uint8   // lockNone, lockLocking, lockShared, lockUnlocking
	lock     []uint8 // per target: lockNone ... lockUnlocking
	nlocks   int     // targets whose lock state is not lockNone
	started  []bool  // PSCW access epoch targets (access == sideOpen or sideClosing)
	access   uint8   // PSCW access side: sideNone ... sideClosing
	exposure uint8   // PSCW exposure side: sideNone ... sideClosing
	freeing  bool    // Free is running (or has run)

	// Accumulates and atomics run without the window's mutex (they wait
	// for their round trips): inflight counts them per target, so that a
	// call closing an epoch waits until those it covers have finished.
	inflight  []int32
	ninflight int
}

// Lock states of a target (epochs.lock) and of lock_all (epochs.lockAll).
const (
	lockNone      uint8 = iota
	lockLocking         // Lock (LockAll) is acquiring it
	lockShared          // held shared (lock_all is always shared)
	lockExclusive       // held exclusive
	lockUnlocking       // Unlock (UnlockAll) is releasing it
)

// States of each PSCW side (epochs.access, epochs.exposure).
const (
	sideNone    uint8 = iota
	sideOpening       // Start is waiting for the posts; Post is posting
	sideOpen
	sideClosing // Complete, Wait or Test is running
)

// Fence states.
const (
	fenceNone    uint8 = iota
	fenceOpen          // a fence epoch is open
	fenceRunning       // a Fence call is running
)

func (e *epochs) init(size int) {
	e.lock = make([]uint8, size)
	e.started = make([]bool, size)
	e.inflight = make([]int32, size)
}

func held(st uint8) bool { return st == lockShared || st == lockExclusive }

func (e *epochs) canAccess(target int) bool {
	return e.fence == fenceOpen || e.lockAll == lockShared || held(e.lock[target]) ||
		(e.access == sideOpen && e.started[target])
}

// noAccess says why target cannot be accessed (canAccess is false), and
// what to do.
func (e *epochs) noAccess(target int) string {
	switch {
	case e.fence == fenceRunning:
		return "a Fence is running (Fence must not run concurrently with operations)"
	case e.lock[target] == lockLocking:
		return fmt.Sprintf("the lock on rank %d is still being acquired (wait for Lock to return)", target)
	case e.lock[target] == lockUnlocking:
		return fmt.Sprintf("the lock on rank %d is being released (Unlock is running)", target)
	case e.lockAll == lockLocking:
		return "LockAll has not returned yet"
	case e.lockAll == lockUnlocking:
		return "UnlockAll is running"
	case e.access == sideOpening:
		return "Start has not returned yet"
	case e.access == sideClosing:
		return "Complete is running"
	case e.access == sideOpen:
		return fmt.Sprintf("rank %d is not in the group of the open access epoch (Start)", target)
	case e.nlocks > 0:
		return fmt.Sprintf("this rank holds no lock on rank %d, only on others (call Lock(%d) first)", target, target)
	case e.exposure != sideNone:
		return "an exposure epoch (Post) gives this rank no access to others: open an access epoch with Start, Lock, LockAll or Fence"
	}
	return "open one with Fence, Lock, LockAll or Start"
}

// open names an open (or opening, or closing) epoch and what ends it, or
// "" if none is. A fence epoch does not count.
func (e *epochs) open() string {
	switch {
	case e.lockAll == lockLocking:
		return "LockAll is being acquired"
	case e.lockAll == lockUnlocking:
		return "UnlockAll is running"
	case e.lockAll != lockNone:
		return "LockAll is held (call UnlockAll first)"
	case e.nlocks > 0:
		for t, st := range e.lock {
			switch st {
			case lockLocking:
				return fmt.Sprintf("a lock on rank %d is being acquired", t)
			case lockUnlocking:
				return fmt.Sprintf("the lock on rank %d is being released", t)
			case lockShared, lockExclusive:
				return fmt.Sprintf("a lock on rank %d is held (call Unlock(%d) first)", t, t)
			}
		}
	case e.access == sideOpening:
		return "Start is waiting for the posts"
	case e.access == sideClosing:
		return "Complete is running"
	case e.access != sideNone:
		return "an access epoch (Start) is open (call Complete first)"
	case e.exposure == sideOpening:
		return "Post is running"
	case e.exposure == sideClosing:
		return "Wait or Test is running"
	case e.exposure != sideNone:
		return "an exposure epoch (Post) is open (call Wait first)"
	}
	return ""
}

// waitChange waits, with win.mu held on entry and on return but released
// meanwhile, until another goroutine changes the window's epoch state (or
// ends an accumulate), or *deadline passes: then it returns an error
// wrapping transport.ErrTimeout. A zero *deadline is set to now plus the
// fabric's timeout (none if the timeout is 0). Callers re-check their
// condition after it returns. Only contended calls get here; the
// uncontended paths allocate nothing.
func (win *Window[T]) waitChange(deadline *time.Time) error {
	timeout := win.w.f.Timeout()
	if deadline.IsZero() && timeout > 0 {
		*deadline = time.Now().Add(timeout)
	}
	var left time.Duration
	if !deadline.IsZero() {
		if left = time.Until(*deadline); left <= 0 {
			return fmt.Errorf("%w after %v", transport.ErrTimeout, timeout)
		}
	}
	if win.changed == nil {
		win.changed = make(chan struct{})
	}
	ch := win.changed
	win.mu.Unlock()
	if left > 0 {
		t := time.NewTimer(left)
		select {
		case <-ch:
		case <-t.C:
		}
		t.Stop()
	} else {
		<-ch
	}
	win.mu.Lock()
	return nil
}

// changedState wakes the goroutines in waitChange; win.mu held. It costs
// nothing when nobody waits.
func (win *Window[T]) changedState() {
	if win.changed != nil {
		close(win.changed)
		win.changed = nil
	}
}

// waitInflight waits (win.mu held, released meanwhile) until no
// accumulate or atomic to target (every target if target < 0) is running.
// The caller has already moved the state so that no new one can start.
func (win *Window[T]) waitInflight(target int, deadline *time.Time) error {
	for (target >= 0 && win.ep.inflight[target] > 0) || (target < 0 && win.ep.ninflight > 0) {
		if err := win.waitChange(deadline); err != nil {
			return err
		}
	}
	return nil
}

// beginAtomics checks an accumulate or atomic of count elements (none if
// count is 0) to target at disp and, unless count is 0, records it as
// running: the caller then runs it without the window's mutex and calls
// endAtomics(target) when it has finished.
func (win *Window[T]) beginAtomics(target, disp, count int) error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if err := win.check(target, disp, count); err != nil || count == 0 {
		return err
	}
	win.atomicsOn(target)
	win.ep.inflight[target]++
	win.ep.ninflight++
	return nil
}

// endAtomics ends what beginAtomics began.
func (win *Window[T]) endAtomics(target int) {
	win.mu.Lock()
	win.ep.inflight[target]--
	win.ep.ninflight--
	if win.ep.inflight[target] == 0 {
		win.changedState()
	}
	win.mu.Unlock()
}
