package lock

import (
	"sync/atomic"
	"time"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// slot is the result words, and the work request, of the one operation
// at a time on one target (or on lock_all, in leader mode): package rma's
// state machine keeps a second operation on it away, so that operations
// on different targets run concurrently without sharing them. In target
// mode LockAll and UnlockAll, which run only while no Lock does, borrow
// every target's slot.
type slot struct {
	l      *Locks
	word   int           // control index of the first result word
	within time.Duration // nonzero: what bounds atomic's waits (undo)

	// The last release atomics posted without waiting (sequence numbers,
	// 0: none), to the slot's target and (leader mode) to the leader;
	// Close waits for them.
	relT, relG uint64

	// chain holds the atomics a lazy lock's guarded put carries (lazy.go):
	// a slice literal passed to the post would be allocated every time.
	chain [2]transport.Atomic
}

// Result words of a slot (control.LockSlotWords): k = 0 and 1 take the
// old values of the awaited atomics, relTWord and relGWord those of the
// releases nobody waits for, so that a release still in flight on one
// queue pair never writes a word that a later Lock's atomic on another
// queue pair lands in.
const (
	relTWord = 2
	relGWord = 3
)

// undo runs fn, which undoes an attempt that waited out the timeout, with
// the slot's waits bounded by the fabric's notice grace: a rank that
// stopped (the one that kept the lock busy, say the leader) is then given
// up after the grace rather than after a second whole timeout.
func (s *slot) undo(fn func() error) error {
	s.within = s.l.f.NoticeGrace()
	defer func() { s.within = 0 }()
	return fn()
}

// post posts a signalled atomic on rank r's word w whose old value lands
// in result word k (0 or 1) of the slot. Being signalled, its own
// completion tells Await it is done, without an extra flush request.
func (s *slot) post(r, w int, op transport.AtomicOp, a, b uint64, k int) (uint64, error) {
	c := s.l.c
	if words := c.Direct(r); words != nil {
		// A node-local peer's mapped words: the CPU atomic the shm
		// provider would run in the post, done here, complete at once
		// (sequence number 0 is done: Await returns at once).
		if err := s.l.f.DirectReady(r); err != nil {
			return 0, err
		}
		c.Store(s.word+k, directAtomic(&words[w], op, a, b))
		return 0, nil
	}
	return s.l.f.PostAtomic(r, transport.Atomic{Op: op, Local: c.LocalAt(s.word + k), Remote: c.RemoteAt(r, w), CompareAdd: a, Swap: b})
}

// req is one atomic of a pair: op(a, b) on rank r's word w, its old value
// landing in result word k.
type req struct {
	r, w int
	op   transport.AtomicOp
	a, b uint64
	k    int
}

// postPair posts x, then y, as post posts each, and returns their
// sequence numbers and errors (y is not posted if x failed: its error is
// then x's). Two atomics to the same rank that go through requests leave
// as one chain (one write to the socket on soft instead of two); the
// second's completion implies the first's, so both numbers are then the
// second's, and an error is both's.
func (s *slot) postPair(x, y req) (seqX uint64, errX error, seqY uint64, errY error) {
	c := s.l.c
	if x.r != y.r || c.Direct(x.r) != nil {
		if seqX, errX = s.post(x.r, x.w, x.op, x.a, x.b, x.k); errX != nil {
			return 0, errX, 0, errX
		}
		seqY, errY = s.post(y.r, y.w, y.op, y.a, y.b, y.k)
		return seqX, nil, seqY, errY
	}
	ops := [2]transport.Atomic{
		{Op: x.op, Local: c.LocalAt(s.word + x.k), Remote: c.RemoteAt(x.r, x.w), CompareAdd: x.a, Swap: x.b},
		{Op: y.op, Local: c.LocalAt(s.word + y.k), Remote: c.RemoteAt(y.r, y.w), CompareAdd: y.a, Swap: y.b},
	}
	seq, err := s.l.f.PostAtomics(x.r, ops[:])
	return seq, err, seq, err
}

// directAtomic runs op on *p with sync/atomic and returns the old value,
// as the NIC's fetch-and-add and compare-and-swap do. A fetch-add of zero
// (a waiter's look at the word) is a load: it leaves the cache line
// shared, so that many waiters looking at one word do not take it from
// each other and from the holder that is about to release it.
func directAtomic(p *uint64, op transport.AtomicOp, a, b uint64) uint64 {
	if op == transport.FetchAddOp {
		if a == 0 {
			return atomic.LoadUint64(p)
		}
		return atomic.AddUint64(p, a) - a
	}
	for {
		old := atomic.LoadUint64(p)
		if old != a || atomic.CompareAndSwapUint64(p, a, b) {
			return old // a failed swap is the value it saw
		}
	}
}

// postRelease posts an atomic that releases a hold on rank r's word w
// (adds v) without waiting for it: its old value lands in result word k
// (relTWord or relGWord), which nothing reads. The sequence number is kept
// for Close.
func (s *slot) postRelease(r, w int, v uint64, k int) error {
	seq, err := s.postSoon(r, w, v, k)
	if err != nil {
		return err
	}
	if k == relTWord {
		s.relT = seq
	} else {
		s.relG = seq
	}
	return nil
}

// postSoon posts a release (a fetch-and-add of v on rank r's word w, old
// value in result word k) that nobody waits for: through a network, the
// provider may hold it to send it with what this rank posts next
// (transport.PostAtomicSoon: on soft, the next lock's atomics going in the
// same write, while the program comes back for what soft holds:
// verbs/soft/hold.go).
func (s *slot) postSoon(r, w int, v uint64, k int) (uint64, error) {
	c := s.l.c
	if c.Direct(r) != nil {
		return s.post(r, w, transport.FetchAddOp, v, 0, k)
	}
	return s.l.f.PostAtomicSoon(r, transport.Atomic{Op: transport.FetchAddOp, Local: c.LocalAt(s.word + k), Remote: c.RemoteAt(r, w), CompareAdd: v})
}

// postReleases posts the releases of an exclusive lock on rank t (adds
// vT to its Lock word) and at the leader's Global word (adds vG), as
// postRelease posts each. On the leader itself the release at t leaves at
// once: its next lock's Global arrival, a request to itself, is awaited
// (lazy.go), which sends what waits in the cork anyway, on its own.
func (s *slot) postReleases(t int, vT, vG uint64) error {
	var seqT uint64
	var err error
	if s.l.me == Leader {
		seqT, err = s.post(t, control.Lock, transport.FetchAddOp, vT, 0, relTWord)
	} else {
		seqT, err = s.postSoon(t, control.Lock, vT, relTWord)
	}
	if err != nil {
		return err
	}
	s.relT = seqT
	seqG, err := s.postSoon(Leader, control.Global, vG, relGWord)
	if err != nil {
		return err
	}
	s.relG = seqG
	return nil
}

// result is the old value in result word k.
func (s *slot) result(k int) uint64 { return s.l.c.Load(s.word + k) }

// atomic runs one atomic on rank r's word w and returns the old value.
func (s *slot) atomic(r, w int, op transport.AtomicOp, a, b uint64) (uint64, error) {
	seq, err := s.post(r, w, op, a, b, 0)
	if err != nil {
		return 0, err
	}
	if s.within > 0 {
		err = s.l.f.AwaitWithin(r, seq, s.within)
	} else {
		err = s.l.f.Await(r, seq)
	}
	if err != nil {
		return 0, err
	}
	return s.result(0), nil
}

// add adds v to rank r's word w (two's complement for negative v) and
// returns the old value.
func (s *slot) add(r, w int, v uint64) (uint64, error) {
	return s.atomic(r, w, transport.FetchAddOp, v, 0)
}

// read returns rank r's word w, with an atomic (a fetch-add of zero): a
// plain RDMA read of a word that atomics change is not atomic on every
// fabric.
func (s *slot) read(r, w int) (uint64, error) { return s.add(r, w, 0) }

// cas sets rank r's word w to new if it is old, and returns the value it
// had (equal to old on success).
func (s *slot) cas(r, w int, old, new uint64) (uint64, error) {
	return s.atomic(r, w, transport.CompareSwapOp, old, new)
}

// add2 adds v1 to r1's word w1 and v2 to r2's word w2, posting both before
// waiting for either, and returns both old values.
func (s *slot) add2(r1, w1 int, v1 uint64, r2, w2 int, v2 uint64) (uint64, uint64, error) {
	seq1, err := s.post(r1, w1, transport.FetchAddOp, v1, 0, 0)
	if err != nil {
		return 0, 0, err
	}
	seq2, err2 := s.post(r2, w2, transport.FetchAddOp, v2, 0, 1)
	err = s.l.f.Await(r1, seq1)
	if err2 == nil {
		err2 = s.l.f.Await(r2, seq2)
	}
	if err == nil {
		err = err2
	}
	return s.result(0), s.result(1), err
}
