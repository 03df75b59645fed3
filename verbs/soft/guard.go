package soft

import (
	"fmt"

	"github.com/rmago/rmago/verbs"
)

// Guards (verbs.GuardSet, GuardAnd, Guarded): a lock's atomics and the
// first write of its epoch travel as one chain; the responder executes the
// write only if the atomics found the lock free. The guard is responder
// state of the queue pair, set by the chain's atomics as they execute and
// read by the write right behind them (a chain goes out whole, in order,
// so nothing comes between them). A skipped write's payload is read off
// the stream and dropped, and the write completes as executed: the origin
// learns the outcome from the atomics' old values.

// Frame flags of guards (wire.go's flagAck is bit 0).
const (
	flagGuardSet = 1 << 1 // atomic: the guard becomes its outcome
	flagGuardAnd = 1 << 2 // atomic: the guard becomes guard && its outcome
	flagGuarded  = 1 << 3 // write: executed only if the guard holds

	flagsKnown = flagAck | flagGuardSet | flagGuardAnd | flagGuarded
)

// A skipped write's payload is read whole by execute, never in pieces.
var _ = [1]int{}[verbs.MaxGuardedWrite/resumeMin] // MaxGuardedWrite < resumeMin

// checkGuardFlags validates a decoded frame's guard flags: set and and on
// atomics only (not both), guarded on writes of at most MaxGuardedWrite
// bytes only.
func checkGuardFlags(f *frame) error {
	g := f.flags & (flagGuardSet | flagGuardAnd)
	switch {
	case g == flagGuardSet|flagGuardAnd:
		return fmt.Errorf("%w: both guard flags", errFrame)
	case g != 0 && f.kind != kReqFAA && f.kind != kReqCAS:
		return fmt.Errorf("%w: guard flag on request kind %d", errFrame, f.kind)
	case f.flags&flagGuarded != 0 && (f.kind != kReqWrite || f.len > verbs.MaxGuardedWrite):
		return fmt.Errorf("%w: guarded request kind %d of %d bytes", errFrame, f.kind, f.len)
	case f.kind == kReqFAA && g == 0 && f.arg1 != 0:
		return fmt.Errorf("%w: fetch-and-add with a mask and no guard", errFrame)
	}
	return nil
}

// guardFlags turns a work request's guard flags into frame flags, and
// says why the request cannot take them.
func guardFlags(wr *verbs.SendWR, total uint64) (uint8, error) {
	var fl uint8
	switch {
	case wr.Flags&verbs.GuardSet != 0 && wr.Flags&verbs.GuardAnd != 0:
		return 0, fmt.Errorf("%w: GuardSet and GuardAnd together", verbs.ErrInvalid)
	case wr.Flags&verbs.GuardSet != 0:
		fl = flagGuardSet
	case wr.Flags&verbs.GuardAnd != 0:
		fl = flagGuardAnd
	}
	atomic := wr.Op == verbs.OpFetchAdd || wr.Op == verbs.OpCompareSwap
	if fl != 0 && !atomic {
		return 0, fmt.Errorf("%w: a guard on a %v (atomics only)", verbs.ErrInvalid, wr.Op)
	}
	if wr.Flags&verbs.Guarded != 0 {
		if wr.Op != verbs.OpWrite || total > verbs.MaxGuardedWrite {
			return 0, fmt.Errorf("%w: a guarded %v of %d bytes (writes of at most %d)", verbs.ErrInvalid, wr.Op, total, verbs.MaxGuardedWrite)
		}
		fl |= flagGuarded
	}
	return fl, nil
}

// guardAtomic records an executed atomic's outcome in the guard if it is
// a guard; rxMu held.
func (q *qp) guardAtomic(f *frame, old uint64) {
	if f.flags&(flagGuardSet|flagGuardAnd) == 0 {
		return
	}
	ok := old&f.arg1 == 0 // fetch-and-add: arg1 is the mask
	if f.kind == kReqCAS {
		ok = old == f.arg0
	}
	if f.flags&flagGuardSet != 0 {
		q.guard = ok
	} else {
		q.guard = q.guard && ok
	}
}

// skipped reports whether a guarded write is to be skipped; rxMu held.
func (q *qp) skipped(f *frame) bool { return f.flags&flagGuarded != 0 && !q.guard }
