package rma

import (
	"fmt"
	"time"

	"github.com/rmago/rmago/transport"
)

// Waiting on the epoch state machine (epochs.go) without holding win.mu:
// a call whose part is busy waits for a change of state (waitChange, a
// condition variable with a deadline), and a call that closes an access
// epoch waits for the accumulates and atomics it covers, which run
// without win.mu and are counted per target (beginAtomics, endAtomics,
// waitInflight).

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
// endAtomics(target) when it has finished. It returns target's window
// mapped for direct access (direct.go), or nil: the caller then applies
// the operation there itself, as the shm provider would in the post.
func (win *Window[T]) beginAtomics(target, disp, count int) ([]T, error) {
	if err := win.lockReady(target); err != nil {
		return nil, err
	}
	defer win.mu.Unlock()
	if err := win.check(target, disp, count); err != nil || count == 0 {
		return nil, err
	}
	win.atomicsOn(target)
	win.ep.inflight[target]++
	win.ep.ninflight++
	if target == win.w.Rank() {
		return nil, nil // the NIC, through the loopback pair: the one agent for atomic updates
	}
	return win.directTo(target), nil
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
