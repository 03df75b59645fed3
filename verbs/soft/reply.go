package soft

import (
	"syscall"

	"github.com/rmago/rmago/verbs"
)

// Replies: the responder's acknowledgements, read data, atomic results and
// refusals, collected by the receive engine and sent in batches, at once
// when the socket takes them, else by the connection's writer goroutine.

// response is something the responder sends back, queued for the
// connection's writer goroutine so that the reader never blocks on a write.
type response struct {
	f    frame
	data []byte  // read response payload: straight from registered memory (reg), or copied (pooled)
	reg  *region // released (inUse.RUnlock) once data is on the wire
	// pooled: data is a fetch buffer (accumulate.go; a small read's copy),
	// returned once on the wire.
	pooled bool
	off    int  // bytes of header and data already written
	held   bool // off > 0 and the write lock is held for the rest (see sendResponses)
}

// respond sends a response to the peer. What the responder did to memory
// is released first, so that it happens before the requester's
// completion. The goroutine running the receive engine collects the
// responses of the frames it runs and sends them together when it has run
// out of arrived frames (sendResponses), so a burst of requests is
// answered with one system call.
func (q *qp) respond(r response) {
	release()
	if q.rx == nil { // not connected (the fuzz test drives execute directly)
		q.queueResponse(r)
		return
	}
	if q.nresp == respBatch {
		q.sendResponses()
	}
	q.resps[q.nresp] = r
	q.nresp++
	if r.reg != nil {
		q.batchReads++
	}
	if r.bringsData() {
		q.batchData++
	}
}

// bringsData reports whether the response carries what lands in the
// requester's memory: a read's data, an atomic's or a fetching
// accumulate's old values. The receive completions that follow it wait
// until it is written (recvafter.go).
func (r *response) bringsData() bool {
	return r.f.kind == kRespRead || r.f.kind == kRespAtomic
}

// respBatch is the most responses collected before they are sent.
const respBatch = 32

// sendResponses sends the collected responses; rxMu held. They are
// written at once if the socket takes them without blocking and nothing is
// queued before them; otherwise they (or what a partial write left) go to
// the writer goroutine, so that the receive engine never blocks on a write
// (two peers blocked writing to each other would deadlock).
//
// Answers held for a request (held.go) count as held until they are
// written or counted as queued (respQueued): a request write that finds
// neither (withHeldAnswers) goes at once, and, had respHeld been cleared
// first, could have passed them while this goroutine waited for the
// write lock it holds. The receive completions behind them are out
// already, so the request may come of them (the get ping-pong's read of
// the window the answer fills).
func (q *qp) sendResponses() {
	held := q.respHeld.Load()
	n := q.nresp
	if n == 0 {
		if held {
			q.respHeld.Store(false)
			q.sends.Add(1)
		}
		return
	}
	q.nresp, q.batchReads, q.batchData = 0, 0, 0
	sent := 0
	q.respMu.Lock()
	if q.respQueued == 0 && q.wrMu.TryLock() {
		sent = q.writeNow(q.resps[:n])
		if sent < n && q.resps[sent].off > 0 {
			// Part of a frame is on the wire: the rest must follow before
			// any other write. The writer goroutine, which takes it next
			// (nothing else is queued), inherits the write lock.
			q.resps[sent].held = true
		} else {
			q.wrMu.Unlock()
		}
	}
	q.respQueued += n - sent
	for i := sent; i < n; i++ {
		if q.resps[i].bringsData() {
			q.readsQueued++
		}
	}
	if held {
		q.respHeld.Store(false) // written, or counted as queued
		q.sends.Add(1)
	}
	if q.readsQueued == 0 && len(q.heldRecvs) > 0 {
		// The batch's read responses are on the wire: the receives held
		// behind them complete (recvafter.go).
		q.pushHeldRecvs()
	}
	q.respMu.Unlock()
	for i := range sent {
		q.resps[i].sent(q)
	}
	for i := sent; i < n; i++ {
		q.queueResponse(q.resps[i])
	}
	clear(q.resps[:n])
}

// queueResponse hands a response to the writer goroutine.
func (q *qp) queueResponse(r response) {
	select {
	case q.respCh <- r:
	case <-q.done:
		r.drop(q)
	}
}

// sent lets go of what a response's data held once it is on the wire.
func (r *response) sent(q *qp) {
	if r.reg != nil {
		r.reg.inUse.RUnlock()
	}
	if r.pooled {
		q.putFetchBuf(r.data)
	}
}

// drop lets go of a response that will not be sent (the queue pair is
// closing): what its data held, and the write lock if it was held for it.
func (r *response) drop(q *qp) {
	r.sent(q)
	if r.held {
		q.wrMu.Unlock()
	}
}

// writeNow writes rs with one non-blocking writev and reports how many
// went whole; the next one's off records what of it went. wrMu held.
func (q *qp) writeNow(rs []response) int {
	n := 0
	for i := range rs {
		r := &rs[i]
		r.f.encode(&q.respHdrs[i])
		q.iov[n] = syscall.Iovec{Base: &q.respHdrs[i][0]}
		q.iov[n].SetLen(hdrLen)
		n++
		if len(r.data) > 0 {
			q.iov[n] = syscall.Iovec{Base: &r.data[0]}
			q.iov[n].SetLen(len(r.data))
			n++
		}
	}
	q.iovN, q.wrN = n, 0
	err := q.writev()
	clear(q.iov[:n])
	if err != nil && err != errAgain {
		return 0 // the writer goroutine meets the error and fails the queue pair
	}
	left := q.wrN
	for i := range rs {
		size := hdrLen + len(rs[i].data)
		if left < size {
			rs[i].off = left
			return i
		}
		left -= size
	}
	return len(rs)
}

// writeResponses sends queued responses, batching those already queued
// into one gather write.
func (q *qp) writeResponses() {
	defer q.finished.Done()
	const batch = 16
	var (
		hdrs [batch][hdrLen]byte
		bufs [2 * batch][]byte
		regs [batch]*region
		pool [batch][]byte // fetch buffers
		data [batch]bool   // bringsData
	)
	release := func(n int) {
		for i := 0; i < n; i++ {
			if regs[i] != nil {
				regs[i].inUse.RUnlock()
				regs[i] = nil
			}
			if pool[i] != nil {
				q.putFetchBuf(pool[i])
				pool[i] = nil
			}
		}
	}
	for {
		var r response
		select {
		case r = <-q.respCh:
		case <-q.done:
			for {
				select {
				case r := <-q.respCh:
					r.drop(q)
				default:
					return
				}
			}
		}
		// A response whose head a non-blocking write already sent comes
		// with the write lock held for it: nothing may come between.
		held := r.held
		n, nbuf := 0, 0
		for {
			r.f.encode(&hdrs[n])
			// r.off: the part a non-blocking write already sent.
			if r.off < hdrLen {
				bufs[nbuf] = hdrs[n][r.off:]
				nbuf++
				if len(r.data) > 0 {
					bufs[nbuf] = r.data
					nbuf++
				}
			} else {
				bufs[nbuf] = r.data[r.off-hdrLen:]
				nbuf++
			}
			regs[n] = r.reg
			data[n] = r.bringsData()
			if r.pooled {
				pool[n] = r.data
			}
			n++
			if n == batch {
				break
			}
			select {
			case r = <-q.respCh:
				continue
			default:
			}
			break
		}
		if !held {
			q.wrMu.Lock()
		}
		err := q.writeLocked(bufs[:nbuf])
		q.wrMu.Unlock()
		for i := range bufs[:nbuf] {
			bufs[i] = nil
		}
		reads := 0
		for i := range n {
			if data[i] {
				reads++
			}
		}
		release(n)
		q.respMu.Lock()
		q.respQueued -= n
		q.readsQueued -= reads
		if q.readsQueued == 0 {
			q.pushHeldRecvs()
		}
		q.respMu.Unlock()
		if err != nil {
			q.fail(verbs.StatusTransport, q.sendErr("responses", err))
		}
	}
}
