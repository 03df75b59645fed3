package lock

import (
	"sync/atomic"
	"time"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// slot is the result words, and the work request, of the one operation
// at a time on one target: package rma's state machine keeps a second
// operation on it away, so that operations on different targets run
// concurrently without sharing them. LockAll and UnlockAll, which run
// only while no Lock does, borrow every target's slot.
type slot struct {
	l      *Locks
	word   int           // control index of the first result word
	within time.Duration // nonzero: what bounds atomic's waits (undo)

	// rel is the last release posted to the slot's target without
	// waiting (its sequence number; 0: none); Close waits for it.
	rel uint64
}

// Result words of a slot (control.LockSlotWords): resWord takes the old
// values of the awaited atomics, relWord those of the releases nobody
// waits for, so that a release still in flight never writes a word that a
// later Lock's atomic lands in.
const (
	resWord = 0
	relWord = 1
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
// in result word k (resWord or relWord) of the slot. Being signalled, its own
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

// directAtomic runs op on *p with sync/atomic and returns the old value,
// as the NIC's fetch-and-add and compare-and-swap do.
func directAtomic(p *uint64, op transport.AtomicOp, a, b uint64) uint64 {
	if op == transport.FetchAddOp {
		return atomic.AddUint64(p, a) - a
	}
	for {
		old := atomic.LoadUint64(p)
		if old != a || atomic.CompareAndSwapUint64(p, a, b) {
			return old // a failed swap is the value it saw
		}
	}
}

// postRelease posts an atomic that releases a hold on rank t's Lock word
// (adds v) without waiting for it: its old value lands in relWord, which
// nothing reads. The sequence number is kept for Close.
func (s *slot) postRelease(t int, v uint64) error {
	seq, err := s.post(t, control.Lock, transport.FetchAddOp, v, 0, relWord)
	if err != nil {
		return err
	}
	s.rel = seq
	return nil
}

// result is the old value of the last awaited atomic.
func (s *slot) result() uint64 { return s.l.c.Load(s.word + resWord) }

// atomic runs one atomic on rank r's word w and returns the old value.
func (s *slot) atomic(r, w int, op transport.AtomicOp, a, b uint64) (uint64, error) {
	seq, err := s.post(r, w, op, a, b, resWord)
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
	return s.result(), nil
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
