package soft

import "unsafe"

// Held answers. A goroutine that polls its own memory for a peer's write
// (device.Progress) runs the frames that arrived and usually finds what it
// waited for in them: then its program goes on, and often posts a request
// to the same peer at once (the lock ping-pong's next leg). The answers to
// those frames used to leave in a write of their own just before, a
// system call on the way to the program's next request. Now such answers
// (headers alone, the last an atomic's result: holdable) wait in the
// collected responses and leave in the same write as this side's next
// request, or sooner: at the next device.Progress (the poller did not find
// what it waited for and goes on polling), when any goroutine runs the
// stream again, at Close, or when the cork's timer fires, answerDelay
// (corkAtomicDelay, 20 µs) after they were held, later once the program
// computes (a Go timer); answers left behind so make the context answer
// at once for a while (hold.go). Their order
// among the answers is kept: they stay first in the collected responses,
// and a request write takes them only if none were handed to the writer
// goroutine before them.
//
// soft, 2 ranks, the lock ping-pong (lock, put, flush, the flag's
// accumulate, unlock; 8 B): 33.0-34.3 -> 23.7-25.1 µs a round trip.

// answer ends a run of the receive engine: the collected responses are
// sent, unless hold allows them to wait (holdable); rxMu held.
func (q *qp) answer(hold bool) {
	if hold && q.holdable() && q.sendMu.TryLock() {
		// The cork's timer bounds the wait (corkExpired), as it bounds a
		// corked release's: answerDelay (corkAtomicDelay) by a Go timer.
		q.armCork(q.ctx.answerDelay)
		q.respHeld.Store(true)
		q.sendMu.Unlock()
		return
	}
	q.sendResponses()
}

// holdable reports whether the collected responses may wait for this
// side's next request: all are headers alone, and the last answers an
// atomic. A peer that ends a batch with an atomic (a lock's release after
// an accumulate that set a flag) waits for its old value, while this side,
// which has just been given what it polled for, is about to answer with a
// request of its own; a batch of writes is acknowledged at once (holding
// those answers slowed lock_all's flag ping-pong by 4 %: the peer waited
// for them, and this side posted nothing before its next poll). rxMu held.
func (q *qp) holdable() bool {
	n := q.nresp
	if n == 0 || q.batchReads > 0 || q.resps[n-1].f.kind != kRespAtomic {
		return false
	}
	for i := range n {
		if r := &q.resps[i]; len(r.data) > 0 || r.reg != nil || r.pooled {
			return false
		}
	}
	return q.ctx.hold.mayHold() // unless the program leaves them behind (hold.go)
}

// sendHeldAnswers sends the answers held on q, unless another goroutine
// runs the stream: it sends them at the end of its run, or holds them
// again; but it may also be past that point, about to let go of the
// stream (the poller that held them). It reports whether answers are
// still held.
func (q *qp) sendHeldAnswers() bool {
	if !q.respHeld.Load() {
		return false
	}
	if !q.rxMu.TryLock() {
		return true
	}
	q.sendResponses()
	q.rxMu.Unlock()
	return false
}

// withHeldAnswers returns the gather list of a request write: bufs, after
// the answers held for it if any, which it takes; wrMu held. Answers
// queued for the writer goroutine go first: then the held ones stay.
func (q *qp) withHeldAnswers(bufs [][]byte) [][]byte {
	if !q.respHeld.Load() || !q.rxMu.TryLock() {
		return bufs
	}
	defer q.rxMu.Unlock()
	n := q.nresp
	if n == 0 {
		q.respHeld.Store(false)
		return bufs
	}
	q.respMu.Lock()
	queued := q.respQueued
	q.respMu.Unlock()
	if queued > 0 {
		return bufs
	}
	for i := range n {
		q.resps[i].f.encode(&q.respHdrs[i])
	}
	q.withHeld[0] = unsafe.Slice(&q.respHdrs[0][0], n*hdrLen)
	k := 1 + copy(q.withHeld[1:], bufs)
	clear(q.resps[:n])
	q.nresp = 0
	q.respHeld.Store(false)
	q.sends.Add(1)
	q.ctx.hold.cameBack()
	return q.withHeld[:k]
}

// sendHeld sends the answers held on the context's queue pairs.
func (g *progress) sendHeld() {
	list := g.qps.Load()
	if list == nil {
		return
	}
	for _, p := range *list {
		p.sendHeldAnswers()
	}
}
