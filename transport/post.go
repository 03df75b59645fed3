package transport

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/verbs"
)

// Posting work requests: one request or a chain, with the send queue
// kept from overflowing and every so often a request signalled.

// Post posts one send request to rank r. The fabric sets its ID and
// signals it when asked or every so often, so that the send queue drains;
// it returns the request's sequence number, which Wait accepts. wr.Next
// must be nil.
func (f *Fabric) Post(r int, wr *verbs.SendWR) (uint64, error) {
	p, err := f.peerOf(r)
	if err != nil {
		return 0, fmt.Errorf("posting a %v to rank %d: %w", wr.Op, r, err)
	}
	p.postMu.Lock()
	defer p.postMu.Unlock()
	return f.postLocked(p, wr)
}

func (f *Fabric) postLocked(p *peer, wr *verbs.SendWR) (uint64, error) {
	if err := f.Err(p.rank); err != nil {
		return 0, fmt.Errorf("posting a %v to rank %d: %w", wr.Op, p.rank, err)
	}
	if f.closed.Load() {
		return 0, ErrClosed
	}
	seq := p.posted.Load() + 1
	if seq-p.done.Load() >= sendDepth-1 {
		// The queue is full: reclaim it by waiting for the last signalled
		// request. Signalling every signalGap requests guarantees there is
		// one well inside the queue.
		target := p.lastSignaled
		if err := f.waitFor(func() bool { return p.done.Load() >= target }, waitOp{what: "post (send queue full)", rank: p.rank, seq: target, fails: true}, nil); err != nil {
			return 0, err
		}
	}
	if p.c.cheapSignals && p.done.Load()+1 == seq {
		// Nothing else is outstanding: a Flush that follows waits for
		// this request instead of posting its own.
		wr.Flags |= verbs.Signaled
	}
	if seq-p.lastSignaled >= signalGap {
		if wr.Flags&verbs.Signaled == 0 && wr.Op == verbs.OpWrite {
			// Signalled only so that the queue drains: nobody waits for
			// it now, so it may wait in the provider's cork with the
			// writes around it (an 8-byte put stream otherwise sent one
			// request in signalGap on its own, with its own answer).
			wr.Flags |= verbs.Coalesce
		}
		wr.Flags |= verbs.Signaled
	}
	if wr.Flags&verbs.Signaled != 0 {
		p.lastSignaled = seq
	}
	wr.ID = seq<<16 | uint64(p.rank)
	if p.inline != nil && p.selfRx == nil && wr.Next == nil {
		return f.postInline(p, wr, seq)
	}
	if _, err := p.qp.PostSend(wr); err != nil {
		return 0, f.postErr(p, err)
	}
	p.posted.Store(seq)
	return seq, nil
}

// postInline posts wr, request seq, to a peer whose requests complete in
// the post: it is done (with every request before it) when the post
// returns, so no completion is queued, polled and dispatched for it. A
// refused request is recorded as its failure completion would be.
// p.postMu held.
func (f *Fabric) postInline(p *peer, wr *verbs.SendWR, seq uint64) (uint64, error) {
	st, err := p.inline.PostSendCompleted(wr)
	if err != nil {
		return 0, f.postErr(p, err)
	}
	if st == verbs.StatusSuccess {
		advance(&p.done, seq) // before posted: a Flush that reads posted finds it done
		p.posted.Store(seq)
		return seq, nil
	}
	p.posted.Store(seq)
	wc := verbs.WC{ID: wr.ID, Status: st, Op: wr.Op, QPN: p.qp.Num()}
	f.mu.Lock()
	f.setErr(p, &wc)
	f.cond.Broadcast()
	f.mu.Unlock()
	return seq, nil
}

// advance raises *done to seq unless it is there already: completions
// are counted both by dispatch (f.mu held) and by postInline (the peer's
// postMu held), so the count only ever goes up.
func advance(done *atomic.Uint64, seq uint64) {
	for {
		cur := done.Load()
		if seq <= cur || done.CompareAndSwap(cur, seq) {
			return
		}
	}
}

// postErr reports a failed post to p.
func (f *Fabric) postErr(p *peer, err error) error {
	if errors.Is(err, verbs.ErrQPState) {
		// The queue pair failed under us. The provider may say why (the
		// soft provider's error wraps the cause); otherwise its error
		// completions will: wait for them briefly.
		if e := f.Err(p.rank); e != nil {
			return e
		}
		if e := f.peerErr(p, nil); e != nil {
			f.recordErr(p, e) // the caller may end before it polls the completions
			return e
		}
		op := waitOp{what: "post", rank: p.rank}
		if werr := f.waitUntil(func() bool { return p.err.Load() != nil }, op, time.Now().Add(time.Second), nil); werr != nil && !errors.Is(werr, ErrTimeout) {
			return werr
		}
		if cause := p.err.Load(); cause != nil {
			return *cause
		}
		launch.NotifyPeerLost(p.rank)
		return rankErr(p.rank, err)
	}
	return fmt.Errorf("transport: posting to rank %d: %w", p.rank, err)
}

// postChainLocked posts p.chain[:n] (operations and buffers filled in) as
// one chain of work requests; p.postMu held. It returns the last one's
// sequence number.
func (f *Fabric) postChainLocked(p *peer, n int) (uint64, error) {
	if err := f.Err(p.rank); err != nil {
		return 0, fmt.Errorf("posting atomics to rank %d: %w", p.rank, err)
	}
	if f.closed.Load() {
		return 0, ErrClosed
	}
	first := p.posted.Load() + 1
	for first+uint64(n)-p.done.Load() >= sendDepth-1 {
		// Reclaim the queue as postLocked does; chains are far shorter
		// than signalGap, so a signalled request is well inside it.
		target := p.lastSignaled
		if err := f.waitFor(func() bool { return p.done.Load() >= target }, waitOp{what: "post (send queue full)", rank: p.rank, seq: target, fails: true}, nil); err != nil {
			return 0, err
		}
	}
	for i := range n {
		wr := &p.chain[i]
		seq := first + uint64(i)
		if seq-p.lastSignaled >= signalGap || i == n-1 {
			wr.Flags |= verbs.Signaled // the last, so that the chain can be waited for
		}
		if wr.Flags&verbs.Signaled != 0 {
			p.lastSignaled = seq
		}
		wr.ID = seq<<16 | uint64(p.rank)
		wr.Next = nil
		if i > 0 {
			p.chain[i-1].Next = wr
		}
	}
	if p.inline != nil && p.selfRx == nil {
		// Each completes in its post: one at a time, nothing to poll.
		for i := range n {
			p.chain[i].Next = nil
			if _, err := f.postInline(p, &p.chain[i], first+uint64(i)); err != nil {
				return 0, err
			}
		}
		return first + uint64(n) - 1, nil
	}
	bad, err := p.qp.PostSend(&p.chain[0])
	if err != nil {
		// The requests before the refused one were posted.
		for i := range n {
			if &p.chain[i] == bad {
				if i > 0 {
					p.posted.Store(first + uint64(i) - 1)
				}
				break
			}
		}
		return 0, f.postErr(p, err)
	}
	last := first + uint64(n) - 1
	p.posted.Store(last)
	return last, nil
}

// The one-sided operations below build their work request in storage the
// peer owns, under its post lock, so that posting allocates nothing. Each
// returns the request's sequence number for Wait.

// Write posts an RDMA write of n bytes from local to remote at rank r.
func (f *Fabric) Write(r int, local Local, remote Remote, n uint32) (uint64, error) {
	return f.post(r, verbs.OpWrite, 0, local, n, remote, 0, 0)
}

// Read posts an RDMA read of n bytes from remote at rank r into local.
func (f *Fabric) Read(r int, local Local, remote Remote, n uint32) (uint64, error) {
	return f.post(r, verbs.OpRead, 0, local, n, remote, 0, 0)
}

// post posts one request, built in p.wr, to rank r.
func (f *Fabric) post(r int, op verbs.Opcode, flags verbs.SendFlags, local Local, n uint32, remote Remote, arg0, arg1 uint64) (uint64, error) {
	p, err := f.peerOf(r)
	if err != nil {
		return 0, fmt.Errorf("posting a %v to rank %d: %w", op, r, err)
	}
	p.postMu.Lock()
	defer p.postMu.Unlock()
	if op == verbs.OpWrite && n > 0 && n <= p.inlineMax {
		flags |= verbs.Inline // the data goes in the request
	}
	p.sge[0] = verbs.SGE{Addr: local.Addr, Length: n, LKey: f.lkeyOn(local.LKey, p.ci)}
	p.wr = verbs.SendWR{Op: op, Flags: flags, SGL: p.sge[:1], RemoteAddr: remote.Addr, RKey: remote.RKey, CompareAdd: arg0, Swap: arg1}
	if n == 0 {
		p.wr.SGL = nil
	}
	return f.postLocked(p, &p.wr)
}
