package rma

// A fence between three and seven ranks awaits its second round lazily
// and only where it is needed (sync/fence/lazy.go): it returns once its
// first round is done, and this rank waits for a rank's word that its
// window is complete only when it reaches that window again, or opens a
// lock or PSCW access epoch, and only if a third rank put into it.

// lockReady takes win.mu once rank target's window is complete for this
// rank's next access. On error win.mu is not held. A target out of range
// waits for nothing (check refuses it under the lock).
func (win *Window[T]) lockReady(target int) error { return win.lockReadyFor(target, false) }

// lockReadyFor is lockReady that also confirms a lazy lock on target
// (lazy.go) unless carry and the lock has sent nothing yet: the caller's
// put then carries its atomics.
func (win *Window[T]) lockReadyFor(target int, carry bool) error {
	inRange := target >= 0 && target < len(win.remotes)
	for {
		var gen uint64
		if inRange {
			var err error
			if gen, err = win.fence.Ready(target); err != nil {
				return err
			}
		}
		win.mu.Lock()
		if !inRange {
			return nil
		}
		if win.fence.Gen() == gen {
			if err := win.settleLazy(target, carry); err != nil {
				win.mu.Unlock()
				return err
			}
			if win.fence.Gen() == gen {
				return nil
			}
		}
		// A fence ran in between and deferred a new second round.
		win.mu.Unlock()
	}
}

// lockSettled takes win.mu once every rank's window this rank needs is
// complete (the last fence's second round), before an access epoch of
// another kind opens. On error win.mu is not held.
func (win *Window[T]) lockSettled(name string) error {
	for {
		gen, err := win.fence.Settle()
		if err != nil {
			return win.wrapf(err, "%s", name)
		}
		win.mu.Lock()
		if win.fence.Gen() == gen {
			return nil
		}
		win.mu.Unlock()
	}
}
