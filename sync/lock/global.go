package lock

import (
	"errors"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// Leader mode (jobs that reach some rank through a network): the leader's
// Global word keeps lock_all and exclusive locks apart, so that lock_all
// is one atomic whatever the job size and an exclusive lock two (its
// arrival there and the target's compare-and-swap), after foMPI's two
// levels of lock words.

// Leader is the rank whose Global word arbitrates between exclusive locks
// and lock_all in leader mode.
const Leader = 0

// The leader's Global word keeps lock_all holders and exclusive lockers
// apart. It counts, for each class (lock_all and exclusive), its holders
// and its waiters, and keeps a generation per class and a turn bit:
//
//	bits  0-12  lock_all holders      bits 26-38  exclusive holders
//	bits 13-25  lock_all waiters      bits 39-51  exclusive waiters
//	bits 52-56  lock_all generation   bits 57-61  exclusive generation
//	bit  62     turn: set, exclusive lockers win a tie; clear, lock_all
//
// Holders of one class exclude holders of the other; members of a class
// share (exclusive lockers of different targets meet at the targets'
// words instead). The counts change by fetch-add, the rest only by
// compare-and-swap.
const (
	fieldBits = 13
	fieldMask = 1<<fieldBits - 1
	genBits   = 5
	genMask   = 1<<genBits - 1
	turnBit   = uint64(1) << 62

	// maxClass bounds each count: ranks holding or waiting for lock_all,
	// and exclusive locks being taken or held at once over the job.
	maxClass = fieldMask
)

// class is one side of the Global word: the shifts of its fields.
type class struct {
	hold, wait, gen uint
	turn            bool // the turn bit's value that favours this class
}

var (
	classAll  = class{hold: 0, wait: 13, gen: 52, turn: false}
	classExcl = class{hold: 26, wait: 39, gen: 57, turn: true}
)

func (c class) other() class {
	if c.turn {
		return classAll
	}
	return classExcl
}

func (c class) holders(s uint64) uint64 { return s >> c.hold & fieldMask }
func (c class) waiters(s uint64) uint64 { return s >> c.wait & fieldMask }
func (c class) generation(s uint64) uint64 {
	return s >> c.gen & genMask
}
func (c class) hasTurn(s uint64) bool { return (s&turnBit != 0) == c.turn }

// one is a holder of the class, as an addend; toWait turns a holder into a
// waiter; minusOne removes a holder.
func (c class) one() uint64      { return 1 << c.hold }
func (c class) toWait() uint64   { return 1<<c.wait - 1<<c.hold }
func (c class) minusOne() uint64 { return -(uint64(1) << c.hold) }

// admits reports whether an arrival of class c whose fetch-add returned
// old holds at once: the other class neither holds nor waits.
func (c class) admits(old uint64) bool {
	o := c.other()
	return o.holders(old) == 0 && o.waiters(old) == 0
}

// admitMask is the bits of the other class's holders and waiters: an
// arrival is admitted if its old value has none of them set (admits), the
// condition a guard fetch-and-add checks at the leader (lazy.go).
func (c class) admitMask() uint64 {
	o := c.other()
	return fieldMask<<o.hold | fieldMask<<o.wait
}

// canConvert reports whether c's waiters may all become holders in state
// s: the other class holds nothing, and either c is in its phase and the
// other class does not wait, or nobody holds and c has the turn (or the
// other class does not wait).
func (c class) canConvert(s uint64) bool {
	o := c.other()
	switch {
	case c.waiters(s) == 0 || o.holders(s) != 0:
		return false
	case c.holders(s) > 0:
		return o.waiters(s) == 0
	default:
		return o.waiters(s) == 0 || c.hasTurn(s)
	}
}

// convert makes every waiter of c a holder, advances c's generation (how
// the waiters learn it) and gives the next tie to the other class.
func (c class) convert(s uint64) uint64 {
	w := c.waiters(s)
	s = s - w<<c.wait + w<<c.hold
	g := (c.generation(s) + 1) & genMask
	s = s&^(genMask<<c.gen) | g<<c.gen
	if c.turn {
		return s &^ turnBit
	}
	return s | turnBit
}

// waitGlobal waits, as a waiter of class c whose state after becoming one
// was s, until a conversion has made it a holder (c's generation is no
// longer g0), converting the waiters itself when the state allows. On
// failure it withdraws (unless the fabric failed).
func (l *Locks) waitGlobal(sl *slot, c class, s uint64, b *backoff) error {
	g0 := c.generation(s)
	for {
		if c.generation(s) != g0 {
			return nil
		}
		if c.canConvert(s) {
			old, err := sl.cas(Leader, control.Global, s, c.convert(s))
			if err != nil {
				return err
			}
			if old == s {
				return nil
			}
			s = old
			continue
		}
		if err := l.pause(b); err != nil {
			return l.leaveGlobal(sl, c, g0, l.busyGlobal(err, sl, c, s))
		}
		var err error
		if s, err = sl.read(Leader, control.Global); err != nil {
			return err
		}
	}
}

// leaveGlobal withdraws a waiter of class c that gives up with err: it
// removes itself from the waiters, or, if a conversion made it a holder
// meanwhile, releases. It returns err.
func (l *Locks) leaveGlobal(sl *slot, c class, g0 uint64, err error) error {
	s, rerr := sl.read(Leader, control.Global)
	for rerr == nil {
		if c.generation(s) != g0 {
			rerr = l.releaseGlobal(sl, c)
			break
		}
		var old uint64
		if old, rerr = sl.cas(Leader, control.Global, s, s-1<<c.wait); rerr == nil && old == s {
			break
		}
		s = old
	}
	if rerr != nil {
		return errors.Join(err, rerr)
	}
	return err
}

// enterGlobal is the whole entry of class c whose arrival (a fetch-add of
// c.one()) returned old: hold at once, or become a waiter and wait.
func (l *Locks) enterGlobal(sl *slot, c class, old uint64, b *backoff) error {
	if c.admits(old) {
		return nil
	}
	old, err := sl.add(Leader, control.Global, c.toWait())
	if err != nil {
		return err
	}
	return l.waitGlobal(sl, c, old+c.toWait(), b)
}

// releaseGlobal releases a holder of class c. The last holder of its
// phase hands the word over to the other class's waiters, if any (one
// attempt; they also convert themselves when they look).
func (l *Locks) releaseGlobal(sl *slot, c class) error {
	old, err := sl.add(Leader, control.Global, c.minusOne())
	if err != nil {
		return err
	}
	return l.handOver(sl, c, old)
}

// handOver, after a release of class c whose fetch-add returned old, lets
// the other class's waiters in if that release ended c's phase.
func (l *Locks) handOver(sl *slot, c class, old uint64) error {
	if c.holders(old) != 1 {
		return nil
	}
	s := old + c.minusOne()
	if o := c.other(); o.canConvert(s) {
		_, err := sl.cas(Leader, control.Global, s, o.convert(s))
		return err
	}
	return nil
}

// takeExclusiveLeader takes an exclusive lock on t in leader mode. It
// posts its arrival at the leader's Global word and a compare-and-swap of
// t's word from 0 to the exclusive bit together (one round trip
// uncontended). If lock_all holds or waits, it gives the target back and
// waits at the Global word first; then, if the target was not free, it
// waits at the target as a writer.
//
// A rank that already holds an exclusive lock is an exclusive holder at
// the Global word: a second exclusive lock joins it there without waiting,
// since lock_all cannot be held meanwhile. (Waiting behind a lock_all
// waiter would deadlock: it waits for the first lock's release.) Posting
// the arrival under the mutex orders it, on the queue pair to the leader,
// before the release of any lock this rank holds, which unlockExclusive
// posts under the mutex as well.
func (l *Locks) lockExclusiveLeader(sl *slot, t int, b *backoff) error {
	l.mu.Lock()
	var seqG uint64
	var err error
	joined := l.nexcl.Load() > 0
	if joined {
		seqG, err = sl.post(Leader, control.Global, transport.FetchAddOp, classExcl.one(), 0, 0)
	}
	l.mu.Unlock()
	if err != nil {
		return err
	}
	if err := l.takeExclusiveLeader(sl, t, b, joined, seqG); err != nil {
		return err
	}
	l.mu.Lock()
	l.nexcl.Add(1)
	l.mu.Unlock()
	return nil
}

// takeExclusiveLeader is lockExclusiveLeader's protocol. joined: this rank
// already holds an exclusive lock and posted the Global arrival as seqG;
// it is admitted whatever the word says.
func (l *Locks) takeExclusiveLeader(sl *slot, t int, b *backoff, joined bool, seqG uint64) error {
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
	_, err := l.settleExclusiveLeader(sl, t, b, joined, seqG, seqT, errT)
	return err
}

// settleExclusiveLeader waits for an exclusive lock's atomics, posted as
// seqG (the Global arrival, old value in result word 0) and seqT (the
// swap at t, word 1; errT if its post failed), and takes the lock: at
// once if both found it free (free), else by waiting at the Global word
// and at t. joined: admitted at the Global word whatever it says.
func (l *Locks) settleExclusiveLeader(sl *slot, t int, b *backoff, joined bool, seqG, seqT uint64, errT error) (free bool, err error) {
	if err := l.f.Await(Leader, seqG); err != nil {
		return false, err
	}
	oldG := sl.result(0)
	if errT == nil {
		errT = l.f.Await(t, seqT)
	}
	if errT != nil {
		if t == Leader {
			// The release would queue behind the failed request on the
			// same queue pair and wait out a second timeout.
			return false, errT
		}
		return false, errors.Join(errT, l.releaseGlobal(sl, classExcl))
	}
	gotT := sl.result(1) == 0
	admitted := joined || classExcl.admits(oldG)
	if gotT && admitted {
		return true, nil
	}
	if !admitted {
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
			return false, err
		}
		if err := l.waitGlobal(sl, classExcl, oldG+classExcl.toWait(), b); err != nil {
			return false, err
		}
	}
	if gotT {
		return false, nil
	}
	if err := l.waitTarget(sl, t, b); err != nil {
		if t == Leader && !errors.Is(err, errBusy) {
			return false, err // an atomic to the leader failed: see above
		}
		if errors.Is(err, errBusy) {
			return false, errors.Join(err, sl.undo(func() error { return l.releaseGlobal(sl, classExcl) }))
		}
		return false, errors.Join(err, l.releaseGlobal(sl, classExcl))
	}
	return false, nil
}

// unlockExclusive releases the exclusive lock on target in leader mode:
// target's word and the leader's Global word, both posted before either
// is awaited. Without wait, neither is awaited, and the hand-over to
// lock_all waiters (best effort) is left to them.
func (l *Locks) unlockExclusive(sl *slot, target int, wait bool) error {
	// Posted under the mutex: see lockExclusiveLeader.
	l.mu.Lock()
	l.nexcl.Add(-1)
	if !wait {
		err := sl.postReleases(target, release(l.me), classExcl.minusOne())
		l.mu.Unlock()
		if err == nil {
			err = l.f.Err(Leader)
		}
		return l.released(target, err)
	}
	seqT, err, seqG, errG := sl.postPair(req{target, control.Lock, transport.FetchAddOp, release(l.me), 0, 0},
		req{Leader, control.Global, transport.FetchAddOp, classExcl.minusOne(), 0, 1})
	l.mu.Unlock()
	if err != nil {
		return err
	}
	err = l.f.Await(target, seqT)
	// With target the leader, the Global release is queued behind the
	// failed one: waiting for it would wait out a second timeout.
	if errG == nil && (err == nil || target != Leader) {
		if errG = l.f.Await(Leader, seqG); errG == nil {
			errG = l.handOver(sl, classExcl, sl.result(1))
		}
	}
	return errors.Join(err, errG)
}

// lockAllGlobal takes lock_all in leader mode: one atomic at the leader,
// waiting while exclusive locks are held (or, for fairness, waited for)
// anywhere.
func (l *Locks) lockAllGlobal(b *backoff) error {
	sl := &l.slots[l.size]
	old, err := sl.add(Leader, control.Global, classAll.one())
	if err != nil {
		return err
	}
	return l.enterGlobal(sl, classAll, old, b)
}

// unlockAllGlobal releases lock_all in leader mode. The caller has
// completed the operations it issued under it, so the release is posted
// without waiting for it (see Unlock), unless a request to the leader is
// still outstanding.
func (l *Locks) unlockAllGlobal() error {
	sl := &l.slots[l.size]
	if l.f.Outstanding(Leader) {
		return l.releaseGlobal(sl, classAll)
	}
	return l.released(Leader, sl.postRelease(Leader, control.Global, classAll.minusOne(), relGWord))
}
