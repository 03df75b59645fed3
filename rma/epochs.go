package rma

import (
	"fmt"
	"time"
)

// The epoch state machine of a window: the one place that decides which
// synchronization call may run when, and what each leaves behind. The
// protocols (sync/fence, sync/lock, sync/pscw) keep no epoch state of
// their own; they run only the transitions this machine allows.
//
// A window's epochs are five parts, each in one of these states:
//
//	part      states                                      the epoch
//	fence     closed, open, closing                       fence (closing: a Fence runs)
//	lock[t]   closed, opening, open, openExcl, closing    this rank's lock on rank t
//	lockAll   closed, opening, open, closing              LockAll
//	access    closed, opening, open, closing              PSCW access (Start ... Complete)
//	exposure  closed, opening, open, closing              PSCW exposure (Post ... Wait)
//
// Every synchronization call is one transition of one part (the table
// kinds). enter checks the call against the whole state (guard), waits
// if the call must (below), and moves the part to the call's via state;
// the call then runs its protocol without win.mu; leave moves the part to
// the call's ok or failed state:
//
//	call              part      from            via      ok        failed
//	Fence             fence     closed, open    closing  open      open
//	Fence(NoSucceed)  fence     closed, open    closing  closed    closed
//	Lock(Shared)      lock[t]   closed          opening  open      closed
//	Lock(Exclusive)   lock[t]   closed          opening  openExcl  closed
//	Unlock            lock[t]   open, openExcl  closing  closed    closed
//	LockAll           lockAll   closed          opening  open      closed
//	UnlockAll         lockAll   open            closing  closed    closed
//	Post              exposure  closed          opening  open      closed
//	Wait, Test        exposure  open            closing  closed    open
//	Start             access    closed          opening  open      closed
//	Complete          access    open            closing  closed    closed
//
// The guard, across parts: Lock and LockAll fail inside a fence or access
// epoch, Start inside a fence or passive-target epoch, Post inside a fence
// epoch, Fence while another epoch is open or another Fence runs, each
// with ErrEpochConflict. A closing call whose part is not in a from state
// fails (ErrNotLocked, ErrNotStarted, ErrNotPosted). Failures change
// nothing. An opening call whose own part is busy (a Lock of a target this
// rank locks, a Lock while LockAll is held, LockAll while any lock is
// held, a Post while an exposure epoch is open, a Start while an access
// epoch is) waits, like a mutex, until the part is closed, bounded by the
// fabric's timeout (an error wrapping transport.ErrTimeout): goroutines of
// a rank can each lock, access and unlock a target.
//
// Calls that close an access epoch (Unlock, UnlockAll, Complete, Fence:
// the table's drains) also wait, in via, for the accumulates and atomics
// the epoch covers, which run without win.mu (inflight); if that wait
// times out the part goes back to its from state.
//
// Epochs belong to the window (the rank, as in MPI), not to the goroutine
// that opened them. win.mu guards the state and is held only for a
// transition, never while a call waits for a peer. An operation needs an
// access epoch to its target (canAccess); a part in opening or closing
// gives none, so operations issued meanwhile fail with ErrNoEpoch.
//
// move is the only function that changes a part's state; a tracer or a
// checker of transitions hooks in there (epochs.hook).

// state is the state of one part of a window's epochs.
type state uint8

const (
	closed   state = iota // no epoch
	opening               // the call opening the epoch runs (Lock, LockAll, Post, Start)
	open                  // open; a lock: held shared
	openExcl              // a lock held exclusive
	closing               // the call ending the epoch runs (Unlock, UnlockAll, Complete, Wait, Test, Fence)
)

func (s state) String() string {
	switch s {
	case closed:
		return "closed"
	case opening:
		return "opening"
	case open:
		return "open"
	case openExcl:
		return "openExcl"
	case closing:
		return "closing"
	}
	return fmt.Sprintf("state(%d)", uint8(s))
}

// part is one part of a window's epochs.
type part uint8

const (
	partFence part = iota
	partLock       // per target
	partLockAll
	partAccess
	partExposure
)

// kind is a synchronization call, a transition of the state machine.
type kind uint8

const (
	kindFence kind = iota
	kindFenceLast
	kindLockShared
	kindLockExcl
	kindUnlock
	kindLockAll
	kindUnlockAll
	kindPost
	kindWait
	kindTest
	kindStart
	kindComplete
)

// kinds is the state machine's transition table (see above).
var kinds = [...]struct {
	name     string
	part     part
	from     uint8 // the states it starts from, as a set (1<<state)
	via      state
	ok, fail state
	drains   bool // waits in via until inflight accumulates covered by the epoch end
}{
	kindFence:      {"Fence", partFence, 1<<closed | 1<<open, closing, open, open, true},
	kindFenceLast:  {"Fence", partFence, 1<<closed | 1<<open, closing, closed, closed, true},
	kindLockShared: {"Lock", partLock, 1 << closed, opening, open, closed, false},
	kindLockExcl:   {"Lock", partLock, 1 << closed, opening, openExcl, closed, false},
	kindUnlock:     {"Unlock", partLock, 1<<open | 1<<openExcl, closing, closed, closed, true},
	kindLockAll:    {"LockAll", partLockAll, 1 << closed, opening, open, closed, false},
	kindUnlockAll:  {"UnlockAll", partLockAll, 1 << open, closing, closed, closed, true},
	kindPost:       {"Post", partExposure, 1 << closed, opening, open, closed, false},
	kindWait:       {"Wait", partExposure, 1 << open, closing, closed, open, false},
	kindTest:       {"Test", partExposure, 1 << open, closing, closed, open, false},
	kindStart:      {"Start", partAccess, 1 << closed, opening, open, closed, false},
	kindComplete:   {"Complete", partAccess, 1 << open, closing, closed, closed, true},
}

// transition is one synchronization call going through the state machine:
// enter, the call's protocol, leave.
type transition struct {
	kind   kind
	target int    // lock kinds: the target rank
	group  []int  // Post, Start: the group
	assert Assert // the call's assertions
	from   state  // set by enter: the part's state before the call
}

// desc names the call for messages, with its arguments ("Lock(1, Shared)").
func (tr *transition) desc() string {
	switch tr.kind {
	case kindLockShared:
		return fmt.Sprintf("Lock(%d, %v)", tr.target, Shared)
	case kindLockExcl:
		return fmt.Sprintf("Lock(%d, %v)", tr.target, Exclusive)
	case kindUnlock:
		return fmt.Sprintf("Unlock(%d)", tr.target)
	case kindPost, kindStart:
		return fmt.Sprintf("%s(%v)", kinds[tr.kind].name, tr.group)
	}
	return kinds[tr.kind].name
}

// epochs is a window's epoch state (the parts above) and what goes with it.
type epochs struct {
	fence    state
	lockAll  state
	lock     []state // per target
	nlocks   int     // targets whose lock is not closed
	access   state
	started  []bool // per rank: in the group of the access epoch (access open or closing)
	exposure state
	freeing  bool // Free is running (or has run)

	// noCheck, per target and then for lock_all (index size): the lock
	// was taken with NoCheck, without the protocol, and is released
	// without it.
	noCheck []bool

	// Accumulates and atomics run without the window's mutex (they wait
	// for their round trips): inflight counts them per target, so that a
	// call closing an epoch waits until those it covers have finished.
	inflight  []int32
	ninflight int

	// hook, if set, sees every transition of a part (tests, tracing).
	hook func(k kind, target int, from, to state)
}

func (e *epochs) init(size int) {
	e.lock = make([]state, size)
	e.started = make([]bool, size)
	e.noCheck = make([]bool, size+1)
	e.inflight = make([]int32, size)
}

// at is the state of part p (of target's lock for partLock).
func (e *epochs) at(p part, target int) *state {
	switch p {
	case partFence:
		return &e.fence
	case partLock:
		return &e.lock[target]
	case partLockAll:
		return &e.lockAll
	case partAccess:
		return &e.access
	}
	return &e.exposure
}

// move sets tr's part to state to, with what goes with it: the count of
// locks, a lock's NoCheck, the access epoch's group. It is the only place
// a part's state changes; win.mu held.
func (e *epochs) move(tr *transition, to state) {
	p := kinds[tr.kind].part
	s := e.at(p, tr.target)
	from := *s
	*s = to
	switch {
	case p == partLock && from == closed:
		e.nlocks++
	case p == partLock && to == closed:
		e.nlocks--
	case p == partAccess && from == opening && to == open:
		for _, r := range tr.group {
			e.started[r] = true
		}
	case p == partAccess && to == closed:
		clear(e.started)
	}
	if to == opening && (p == partLock || p == partLockAll) {
		i := tr.target
		if p == partLockAll {
			i = len(e.lock)
		}
		e.noCheck[i] = tr.assert&NoCheck != 0
	}
	if e.hook != nil {
		e.hook(tr.kind, tr.target, from, to)
	}
}

// enter starts transition tr: it checks the call against the state, waits
// while the call's part is busy (opening calls only), moves the part to
// tr's via state and, for calls that drain, waits for the inflight
// accumulates the epoch covers. On an error nothing has changed. win.mu
// held (released while waiting).
func (win *Window[T]) enter(tr *transition) error {
	k := &kinds[tr.kind]
	var deadline time.Time
	for {
		if err := win.liveLocked(k.name); err != nil {
			return err
		}
		busy, err := win.guard(tr)
		if err != nil {
			return err
		}
		if busy == "" {
			break
		}
		if err := win.waitChange(&deadline); err != nil {
			return win.wrapf(err, "%s %s", tr.desc(), busy)
		}
	}
	tr.from = *win.ep.at(k.part, tr.target)
	if k.from&(1<<tr.from) == 0 {
		// guard and the table disagree: a bug in this file.
		panic(fmt.Sprintf("rma: %s admitted from state %v", k.name, tr.from))
	}
	win.ep.move(tr, k.via)
	if !k.drains {
		return nil
	}
	target := -1
	if k.part == partLock {
		target = tr.target
	}
	deadline = time.Time{}
	if err := win.waitInflight(target, &deadline); err != nil {
		win.ep.move(tr, tr.from) // still open: the call may be made again
		win.changedState()
		return win.wrapf(err, "%s waiting for other goroutines' accumulates to finish", tr.desc())
	}
	return nil
}

// leave ends transition tr: its part moves to the call's ok state if its
// protocol succeeded, else to its failed state. win.mu held.
func (win *Window[T]) leave(tr *transition, ok bool) {
	to := kinds[tr.kind].fail
	if ok {
		to = kinds[tr.kind].ok
	}
	win.ep.move(tr, to)
	win.changedState()
}

// guard checks call tr against the window's epochs: an error if it does
// not fit them (it changes nothing), or, for an opening call whose part
// another goroutine's epoch occupies, what it waits for (busy, for the
// message if the wait times out); "" and nil if it may run now. win.mu
// held.
func (win *Window[T]) guard(tr *transition) (busy string, err error) {
	e := &win.ep
	name := kinds[tr.kind].name
	switch tr.kind {
	case kindFence, kindFenceLast:
		switch {
		case e.fence == closing:
			return "", win.errf(ErrEpochConflict, "Fence while another goroutine's Fence is running (Fence is collective: call it from one goroutine of each rank)")
		case e.open() != "":
			return "", win.errf(ErrEpochConflict, "Fence while %s", e.open())
		case tr.assert&NoPrecede != 0 && win.ops:
			return "", win.errf(ErrEpochOpen, "Fence(NoPrecede) after operations in this epoch (drop the NoPrecede assertion)")
		}
	case kindLockShared, kindLockExcl, kindLockAll:
		switch {
		case e.fence != closed:
			return "", win.errf(ErrEpochConflict, "%s inside a fence epoch (end it with Fence(NoSucceed) first)", name)
		case e.access != closed:
			return "", win.errf(ErrEpochConflict, "%s inside a PSCW access epoch (call Complete first)", name)
		case tr.kind == kindLockAll && (e.lockAll != closed || e.nlocks > 0):
			return fmt.Sprintf("waited while %s (by another goroutine, or by this one)", e.open()), nil
		case tr.kind != kindLockAll && e.lockAll != closed:
			return "waited for this rank to release LockAll (taken by another goroutine, or by this one without Unlock)", nil
		case tr.kind != kindLockAll && e.lock[tr.target] != closed:
			return fmt.Sprintf("waited for this rank to release its lock on rank %d (taken by another goroutine, or by this one without Unlock)", tr.target), nil
		}
	case kindUnlock:
		t := tr.target
		switch e.lock[t] {
		case closed:
			return "", win.errf(ErrNotLocked, "Unlock(%d) without a lock on rank %d (call Lock(%d) first)", t, t, t)
		case opening:
			return "", win.errf(ErrNotLocked, "Unlock(%d) while another goroutine's Lock(%d) has not returned", t, t)
		case closing:
			return "", win.errf(ErrNotLocked, "Unlock(%d) while another goroutine is unlocking rank %d", t, t)
		}
	case kindUnlockAll:
		switch e.lockAll {
		case closed:
			return "", win.errf(ErrNotLocked, "UnlockAll without LockAll (call LockAll first)")
		case opening:
			return "", win.errf(ErrNotLocked, "UnlockAll while another goroutine's LockAll has not returned")
		case closing:
			return "", win.errf(ErrNotLocked, "UnlockAll while another goroutine's UnlockAll is running")
		}
	case kindPost:
		switch {
		case e.fence != closed:
			return "", win.errf(ErrEpochConflict, "Post inside a fence epoch (end it with Fence(NoSucceed) first)")
		case e.exposure != closed:
			return "waited for the open exposure epoch to end (call Wait; a second Post needs the first one's Wait)", nil
		}
	case kindWait, kindTest:
		switch e.exposure {
		case closed:
			return "", win.errf(ErrNotPosted, "%s without an exposure epoch (call Post first)", name)
		case opening:
			return "", win.errf(ErrNotPosted, "%s while another goroutine's Post has not returned", name)
		case closing:
			return "", win.errf(ErrNotPosted, "%s while another goroutine's Wait is running", name)
		}
	case kindStart:
		switch {
		case e.fence != closed:
			return "", win.errf(ErrEpochConflict, "Start inside a fence epoch (end it with Fence(NoSucceed) first)")
		case e.lockAll != closed || e.nlocks > 0:
			return "", win.errf(ErrEpochConflict, "Start while %s", e.open())
		case e.access != closed:
			return "waited for the open access epoch to end (call Complete; a second Start needs the first one's Complete)", nil
		}
	case kindComplete:
		switch e.access {
		case closed:
			return "", win.errf(ErrNotStarted, "Complete without an access epoch (call Start first)")
		case opening:
			return "", win.errf(ErrNotStarted, "Complete while another goroutine's Start has not returned")
		case closing:
			return "", win.errf(ErrNotStarted, "Complete while another goroutine's Complete is running")
		}
	}
	return "", nil
}

// freeCheck refuses Free (ErrEpochOpen) while an epoch other than a fence
// epoch is open, a Fence runs, accumulates run or operations are not yet
// completed by a synchronization; win.mu held.
func (win *Window[T]) freeCheck() error {
	switch e := win.ep.open(); {
	case e != "":
		return win.errf(ErrEpochOpen, "Free while %s", e)
	case win.ep.fence == closing:
		return win.errf(ErrEpochOpen, "Free while a Fence is running (Free and Fence are collective: call them from one goroutine of each rank)")
	case win.ep.ninflight > 0:
		return win.errf(ErrEpochOpen, "Free while other goroutines' accumulates are running")
	case win.ops:
		return win.errf(ErrEpochOpen, "Free after operations that no synchronization completed yet (call Fence(NoSucceed) first)")
	}
	return nil
}

func held(s state) bool { return s == open || s == openExcl }

// canAccess reports whether an access epoch to target is open.
func (e *epochs) canAccess(target int) bool {
	return e.fence == open || e.lockAll == open || held(e.lock[target]) ||
		(e.access == open && e.started[target])
}

// anyAccess reports whether an access epoch to some rank is open.
func (e *epochs) anyAccess() bool {
	if e.lockAll == open || e.fence == open || e.access == open {
		return true
	}
	if e.nlocks > 0 {
		for _, s := range e.lock {
			if held(s) {
				return true
			}
		}
	}
	return false
}

// noAccess says why target cannot be accessed (canAccess is false), and
// what to do.
func (e *epochs) noAccess(target int) string {
	switch {
	case e.fence == closing:
		return "a Fence is running (Fence must not run concurrently with operations)"
	case e.lock[target] == opening:
		return fmt.Sprintf("the lock on rank %d is still being acquired (wait for Lock to return)", target)
	case e.lock[target] == closing:
		return fmt.Sprintf("the lock on rank %d is being released (Unlock is running)", target)
	case e.lockAll == opening:
		return "LockAll has not returned yet"
	case e.lockAll == closing:
		return "UnlockAll is running"
	case e.access == opening:
		return "Start has not returned yet"
	case e.access == closing:
		return "Complete is running"
	case e.access == open:
		return fmt.Sprintf("rank %d is not in the group of the open access epoch (Start)", target)
	case e.nlocks > 0:
		return fmt.Sprintf("this rank holds no lock on rank %d, only on others (call Lock(%d) first)", target, target)
	case e.exposure != closed:
		return "an exposure epoch (Post) gives this rank no access to others: open an access epoch with Start, Lock, LockAll or Fence"
	}
	return "open one with Fence, Lock, LockAll or Start"
}

// open names an open (or opening, or closing) epoch and what ends it, or
// "" if none is. A fence epoch does not count.
func (e *epochs) open() string {
	switch {
	case e.lockAll == opening:
		return "LockAll is being acquired"
	case e.lockAll == closing:
		return "UnlockAll is running"
	case e.lockAll != closed:
		return "LockAll is held (call UnlockAll first)"
	case e.nlocks > 0:
		for t, s := range e.lock {
			switch s {
			case opening:
				return fmt.Sprintf("a lock on rank %d is being acquired", t)
			case closing:
				return fmt.Sprintf("the lock on rank %d is being released", t)
			case open, openExcl:
				return fmt.Sprintf("a lock on rank %d is held (call Unlock(%d) first)", t, t)
			}
		}
	case e.access == opening:
		return "Start is waiting for the posts"
	case e.access == closing:
		return "Complete is running"
	case e.access != closed:
		return "an access epoch (Start) is open (call Complete first)"
	case e.exposure == opening:
		return "Post is running"
	case e.exposure == closing:
		return "Wait or Test is running"
	case e.exposure != closed:
		return "an exposure epoch (Post) is open (call Wait first)"
	}
	return ""
}
