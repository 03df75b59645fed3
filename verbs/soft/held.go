package soft

import (
	"runtime"
	"time"
)

// Held answers. A goroutine that polls its own memory for a peer's write
// (device.Progress) runs the frames that arrived and usually finds what it
// waited for in them: then its program goes on, and often posts a request to
// the same peer at once (the lock ping-pong's next leg). The answers to those
// frames used to leave in a write of their own just before, a system call on
// the way to the program's next request. Now such answers (headers, or a few
// bytes copied when their request ran, among them a read's or an atomic's:
// holdable) wait in the collected responses and leave in the same write as
// this side's next request, or sooner: at the next device.Progress (the poller
// did not find what it waited for and goes on polling), when any goroutine
// runs the stream again, at Close, or when the cork's timer fires, answerDelay
// (corkAtomicDelay, 20 µs) after they were held, later once the program
// computes (a Go timer); answers left behind so make the context answer at
// once for a while (hold.go). Their order among the answers is kept: they stay
// first in the collected responses, and a request write takes them only if
// none were handed to the writer goroutine before them.
//
// soft, 2 ranks, the lock ping-pong (lock, put, flush, the flag's
// accumulate, unlock; 8 B): 33.0-34.3 -> 23.7-25.1 µs a round trip. A
// goroutine waiting on a completion queue holds them too when what ran
// gave it its completion (progress.go's spinWaiter): the get ping-pong's
// read answer then leaves with this side's own read.

// holdMode says which answers of a run of the receive engine may wait for
// this side's next request.
type holdMode uint8

const (
	holdNone holdMode = iota
	// holdReads: a goroutine waiting on a completion queue, which what
	// ran gave its completion. It may go on to poll (Unlock, then the
	// flag's wait in the lock ping-pong) rather than post, so it holds only
	// reads' answers: a read is made by a program that then waits for its
	// data at a synchronization, where, on the other side, this program
	// is most often about to make its own requests (the get ping-pong's
	// fences).
	holdReads
	// holdAll: a goroutine polling its own memory (device.Progress),
	// which found what it polled for: its program is about to answer with
	// a request (the lock ping-pong's next leg). Reads' and atomics'.
	holdAll
)

// answer ends a run of the receive engine: the collected responses are
// sent, unless mode allows them to wait (holdable); rxMu held.
func (q *qp) answer(mode holdMode) {
	if mode != holdNone && q.holdable(mode) && q.sendMu.TryLock() {
		// The cork's timer bounds the wait (corkExpired), as it bounds a
		// corked release's: answerDelay (corkAtomicDelay) by a Go timer.
		q.armCork(q.ctx.answerDelay)
		q.respHeld.Store(true)
		q.sendMu.Unlock()
		// The receive completions behind them may go now: this side's
		// next request carries the held answers, or waits for them
		// (answersFirst), so whatever the program does on learning of
		// them reaches the peer after the answers.
		q.respMu.Lock()
		if q.readsQueued == 0 {
			q.pushHeldRecvs()
		}
		q.respMu.Unlock()
		return
	}
	q.sendResponses()
}

// holdable reports whether the collected responses may wait for this
// side's next request: each is a header alone or carries a few bytes
// copied when its request ran (a small read's data, a small fetching
// accumulate's old values: up to smallRead), and one at least answers a
// read or an atomic, which the peer waits for while this side, which has
// just been given what it waited for, is about to send a request of its
// own (the lock ping-pong's release; the get ping-pong's read, which goes
// with this side's own read). A batch of writes alone is acknowledged at
// once (holding those answers slowed lock_all's flag ping-pong by 4 %:
// the peer waited for them, and this side posted nothing before its next
// poll). rxMu held.
func (q *qp) holdable(mode holdMode) bool {
	n := q.nresp
	if n == 0 || q.batchReads > 0 {
		return false
	}
	awaited := false
	for i := range n {
		r := &q.resps[i]
		if r.reg != nil || len(r.data) > smallRead || len(r.data) > 0 && !r.pooled {
			return false
		}
		awaited = awaited || r.f.kind == kRespRead || r.f.kind == kRespAtomic && mode == holdAll
	}
	return awaited && q.ctx.hold.mayHold() // unless the program leaves them behind (hold.go)
}

// smallRead is the most data a held answer carries (holdable), and the
// largest read whose data the responder copies when it runs.
const smallRead = 64

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
// the answers held for it if any, which it takes; wrMu held. ok is false,
// and the request must not be written yet, while answers made before it
// wait for the writer goroutine or are held by a goroutine that runs the
// stream: a request never overtakes an answer. The receive completions
// behind answers are delivered once the answers are written or held for
// the next request (recvafter.go), and a fence's or a Complete's
// notification may come before the reads it follows have completed
// (verbs.DeviceAttr.ReadsBeforeRecv): the program that learns of it and
// posts must not reach the peer before the answers to those reads (a
// read of the peer's window would find the old data).
func (q *qp) withHeldAnswers(bufs [][]byte) (_ [][]byte, ok bool) {
	if !q.respHeld.Load() {
		q.respMu.Lock()
		queued := q.respQueued
		q.respMu.Unlock()
		return bufs, queued == 0
	}
	if !q.rxMu.TryLock() {
		return bufs, false
	}
	defer q.rxMu.Unlock()
	q.respMu.Lock()
	queued := q.respQueued
	behind := len(q.heldRecvs)
	q.respMu.Unlock()
	n := q.nresp
	if n == 0 {
		q.respHeld.Store(false)
		return bufs, queued == 0
	}
	if queued > 0 {
		return bufs, false
	}
	off := 0
	for i := range n {
		r := &q.resps[i]
		r.f.encode((*[hdrLen]byte)(q.heldSlab[off:]))
		off += hdrLen
		off += copy(q.heldSlab[off:], r.data)
		if r.pooled {
			q.putFetchBuf(r.data) // even empty: a zero-length read's buffer
		}
	}
	q.withHeld[0] = q.heldSlab[:off]
	k := 1 + copy(q.withHeld[1:], bufs)
	clear(q.resps[:n])
	q.nresp, q.batchData = 0, 0
	q.heldRecvsBehind = behind // completed once the write is done (recvsAfterWrite)
	q.respHeld.Store(false)
	q.sends.Add(1)
	q.ctx.hold.cameBack()
	return q.withHeld[:k], true
}

// answersFirst waits until the answers withHeldAnswers found ahead of a
// request write have been written or can go with it, and returns the
// request's gather list then; wrMu held on entry and on return, let go
// meanwhile. The goroutine that runs the stream sends or holds its
// answers at the end of its run (this one sends held answers when the
// stream is free), the writer goroutine what it was handed. The wait is
// bounded by the context's timeout (a peer that stopped reading fills the
// socket); a queue pair that failed ends it, the write then failing too.
func (q *qp) answersFirst(bufs [][]byte) ([][]byte, error) {
	var deadline time.Time
	for {
		q.wrMu.Unlock()
		q.sendHeldAnswers()
		runtime.Gosched()
		q.wrMu.Lock()
		out, ok := q.withHeldAnswers(bufs)
		if ok || q.failed.Load() {
			return out, nil
		}
		if t := q.ctx.timeout; t > 0 {
			now := time.Now()
			if deadline.IsZero() {
				deadline = now.Add(t)
			} else if now.After(deadline) {
				return bufs, q.stallErr("took no answers")
			}
		}
	}
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
