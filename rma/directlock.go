package rma

// Lock and Unlock of a node-local target in one step. Where every rank is
// on shm, a free lock is taken, and released, with one CPU atomic on the
// target's lock word (sync/lock's TryDirect and UnlockDirect), without
// letting go of win.mu. These paths make the same state changes as
// enter and leave (through epochs.move, so a hook sees them), but skip
// their general checks and waits: they apply only when nothing else is
// going on, and otherwise leave the call to the general path, which
// reports errors and waits for other goroutines' epochs.

// lockDirect takes an exclusive or shared lock on target in one step and
// reports whether it did; false: nothing changed. win.mu held; the window
// is live and target a rank (syncCheck).
func (win *Window[T]) lockDirect(target int, k kind) bool {
	e := &win.ep
	if e.fence != closed || e.access != closed || e.lockAll != closed || e.lock[target] != closed ||
		!win.locks.TryDirect(target, k == kindLockExcl) {
		return false
	}
	tr := transition{kind: k, target: target, from: closed}
	e.move(&tr, opening)
	e.move(&tr, kinds[k].ok)
	win.changedState()
	return true
}

// unlockDirect releases this rank's lock on target in one step, if it was
// taken with the protocol, no accumulate to target is running, and
// everything issued to target has completed (a node-local target's
// requests complete at post); it reports whether it did. win.mu held; the
// window is live and target a rank.
func (win *Window[T]) unlockDirect(target int) bool {
	e := &win.ep
	from := e.lock[target]
	if !held(from) || e.noCheck[target] || e.inflight[target] != 0 || win.lazy[target] != nil ||
		win.w.f.Outstanding(target) || win.w.stage.pieces.Load() != 0 ||
		!win.locks.UnlockDirect(target, from == openExcl) {
		return false
	}
	win.reads[target] = 0
	tr := transition{kind: kindUnlock, target: target, from: from}
	e.move(&tr, closing)
	e.move(&tr, closed)
	win.ops = e.nlocks > 0 && win.ops
	win.changedState()
	return true
}
