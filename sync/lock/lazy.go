package lock

import (
	"errors"
	"fmt"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// Lazy exclusive locks (leader mode, where the target's provider takes
// guarded writes: soft). Lock returns at once and sends nothing; the
// lock's atomics go with the epoch's first put, as one chain that the
// target executes in order: the Global arrival (when the target is the
// leader), the target's compare-and-swap, and the put, which it executes
// only if both found the lock free (transport.PostGuardedWrite). Confirm
// then waits for the atomics' answers, which come with the put's, and
// takes the lock the slow way if they did not find it free; the put was
// skipped then, and package rma posts it again once the lock is held.
// Lock, Put and Flush so cost one round trip instead of two. A first Get
// goes the same way (WithRead), unguarded: a read changes nothing at the
// target, and one made without the lock is made again once it is held.
//
// The guard covers every rank that could access the target only if both
// words are behind it: the leader's Global word (lock_all holders are
// counted only there) and the target's. So the lock is lazy only where
// both are known before the put lands: the target is the leader (both
// atomics in the chain), or this rank is (its Global arrival completes
// in its post, and the put goes only if it was admitted).

// Shared locks (either mode) need only the target's word, which counts
// lock_all holders too in target mode, and leader mode's lock_all is
// compatible with them: a lazy shared lock's chain is [FetchAdd(T.Lock,
// +1), guarded on the exclusive bit and the waiting writers; the put], to
// any rank whose provider takes guards.

// Pending is a lock taken lazily, until Confirm.
type Pending struct {
	t       int
	shared  bool
	joined  bool   // this rank held an exclusive lock when it arrived at the Global word
	seqG    uint64 // the Global arrival, if posted (postedG)
	seqT    uint64 // the compare-and-swap at t, if posted (postedT)
	postedG bool
	postedT bool
	carried bool // a write (guarded by them) or a read went with the atomics
}

// Target is the rank the lock is on.
func (p *Pending) Target() int { return p.t }

// Sent reports whether any of the lock's atomics has been posted.
func (p *Pending) Sent() bool { return p.postedG || p.postedT }

// Lazy reports whether a lock on target may be taken lazily (Begin):
// another rank, whose provider takes guarded writes, and for an exclusive
// lock leader mode with this rank or target the leader.
func (l *Locks) Lazy(target int, exclusive bool) bool {
	ok := target != l.me && l.c.Direct(target) == nil && l.f.Guards(target) && l.sizeErr() == nil
	if exclusive {
		ok = ok && !l.target && (l.me == Leader || target == Leader)
	}
	return ok
}

// Begin takes a lock on target lazily (Lazy said it may): it sends
// nothing.
func (l *Locks) Begin(target int, exclusive bool) Pending {
	return Pending{t: target, shared: !exclusive}
}

// WithWrite sends p's atomics with a write of n bytes from local to
// remote at p's target, guarded by them, and reports whether it did
// (posted). Not posted: the write is the caller's to make once Confirm
// has taken the lock (a second write, n over transport.MaxGuardedWrite,
// or, this rank being the leader, a Global arrival that was not
// admitted). It waits for no peer.
func (l *Locks) WithWrite(p *Pending, local transport.Local, remote transport.Remote, n uint32) (posted bool, err error) {
	return l.with(p, false, local, remote, n)
}

// WithRead is WithWrite for a read of n bytes from remote into local. The
// target runs it whatever the atomics found; if they did not find the
// lock free, Confirm says so (skipped) and the caller reads again.
func (l *Locks) WithRead(p *Pending, local transport.Local, remote transport.Remote, n uint32) (posted bool, err error) {
	return l.with(p, true, local, remote, n)
}

// with is WithWrite (read false) and WithRead.
func (l *Locks) with(p *Pending, read bool, local transport.Local, remote transport.Remote, n uint32) (posted bool, err error) {
	post := l.f.PostGuardedWrite
	if read {
		post = l.f.PostGuardedRead
	}
	if p.Sent() || n > transport.MaxGuardedWrite {
		return false, nil
	}
	sl := &l.slots[p.t]
	c := l.c
	if p.shared {
		sl.chain[0] = transport.Atomic{Op: transport.FetchAddOp, Local: c.LocalAt(sl.word + 1), Remote: c.RemoteAt(p.t, control.Lock), CompareAdd: 1, Mask: sharedBlockers}
		seq, err := post(p.t, sl.chain[:1], local, remote, n)
		if err != nil {
			return false, err
		}
		p.seqT, p.postedT, p.carried = seq, true, true
		return true, nil
	}
	// Under the mutex, as lockExclusiveLeader: joined and the arrival go
	// together.
	l.mu.Lock()
	defer l.mu.Unlock()
	p.joined = l.nexcl.Load() > 0
	cas := transport.Atomic{Op: transport.CompareSwapOp, Local: c.LocalAt(sl.word + 1), Remote: c.RemoteAt(p.t, control.Lock), Swap: taken(l.me)}
	arrival := transport.Atomic{Op: transport.FetchAddOp, Local: c.LocalAt(sl.word), Remote: c.RemoteAt(Leader, control.Global), CompareAdd: classExcl.one()}
	if p.t == Leader {
		if !p.joined {
			arrival.Mask = classExcl.admitMask()
		}
		sl.chain = [2]transport.Atomic{arrival, cas}
		seq, err := post(p.t, sl.chain[:], local, remote, n)
		if err != nil {
			return false, err
		}
		p.seqG, p.seqT, p.postedG, p.postedT, p.carried = seq, seq, true, true, true
		return true, nil
	}
	// This rank is the leader: its arrival completes in the post.
	seqG, err := sl.post(Leader, control.Global, transport.FetchAddOp, classExcl.one(), 0, 0)
	if err != nil {
		return false, err
	}
	p.seqG, p.postedG = seqG, true
	if err := l.f.Await(Leader, seqG); err != nil {
		return false, err
	}
	if !p.joined && !classExcl.admits(sl.result(0)) {
		return false, nil // Confirm waits for lock_all's phase to end
	}
	sl.chain[0] = cas
	seq, err := post(p.t, sl.chain[:1], local, remote, n)
	if err != nil {
		// Nothing reached the target: give the arrival back.
		p.postedG = false
		return false, errors.Join(err, l.releaseGlobal(sl, classExcl))
	}
	p.seqT, p.postedT, p.carried = seq, true, true
	return true, nil
}

// Confirm takes p's lock for good: it posts the atomics no write took
// (all of them, as Lock would, if nothing was sent), waits for them, and
// waits for the lock the slow way if they did not find it free. skipped:
// the guarded write that went with them was skipped, and the caller posts
// it again (the lock is held now). On error the lock is not held.
func (l *Locks) Confirm(p *Pending) (skipped bool, err error) {
	sl := &l.slots[p.t]
	var b backoff
	b.reset(l.f.Timeout(), l.f.Crowded())
	if p.shared {
		return l.confirmShared(p, sl, &b)
	}
	if !p.Sent() {
		err = l.lockExclusiveLeader(sl, p.t, &b)
	} else {
		var errT error
		if !p.postedT {
			p.seqT, errT = sl.post(p.t, control.Lock, transport.CompareSwapOp, 0, taken(l.me), 1)
			p.postedT = errT == nil
		}
		var free bool
		if free, err = l.settleExclusiveLeader(sl, p.t, &b, p.joined, p.seqG, p.seqT, errT); err == nil {
			l.mu.Lock()
			l.nexcl.Add(1)
			l.mu.Unlock()
			skipped = p.carried && !free
		}
	}
	if err != nil {
		return false, fmt.Errorf("lock: exclusive lock on rank %d: %w", p.t, err)
	}
	return skipped, nil
}

// confirmShared is Confirm of a shared lock.
func (l *Locks) confirmShared(p *Pending, sl *slot, b *backoff) (skipped bool, err error) {
	if !p.Sent() {
		err = l.lockShared(sl, p.t, b)
	} else if err = l.f.Await(p.t, p.seqT); err == nil {
		old := sl.result(1)
		skipped = old&sharedBlockers != 0
		err = l.settleShared(sl, p.t, b, old)
	}
	if err != nil {
		return false, fmt.Errorf("lock: shared lock on rank %d: %w", p.t, err)
	}
	return skipped, nil
}
