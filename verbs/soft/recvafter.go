package soft

import "github.com/rmago/rmago/verbs"

// Receive completions after reads (verbs.DeviceAttr.ReadsBeforeRecv): a
// read's response carries its data straight from registered memory, and
// goes out after the requests that follow it have run (responses are sent
// in batches, or by the writer goroutine when the socket is full). A
// notification posted after a read (a fence's, or PSCW's complete) would
// then tell the target its memory is free while the read's data has not
// left it yet. So a receive completion waits for the read responses
// executed before it: held while some are collected in the batch, it is
// completed once sendResponses has written them (usually straight into
// the socket, with the rest of the batch: the acknowledgement of a
// signalled notification goes in the same write as the read's data,
// where it used to take a write of its own), or, if some still wait for
// the writer goroutine, once that has written them (pushHeldRecvs).
//
// Atomics, fetching accumulates and reads of up to smallRead bytes answer
// with values copied when they run, so the memory is free at once; but
// the reader may have sent its notification before its reads completed,
// and the program here, once it has the notification, may read or write
// the reader's memory where their data lands (the get ping-pong reads
// back the window the get filled). Its requests must reach the reader
// after the answers. So a receive completion waits for every answer
// before it that brings data (bringsData), and goes once they are
// written, or once they are held for this side's next request (held.go),
// which then carries them or waits for them (answersFirst).

// completeRecv puts a receive completion on the receive CQ once every read
// response executed before it has left registered memory; rxMu held (or
// a loopback pair, which reads by copying and queues no response).
func (q *qp) completeRecv(wc verbs.WC) {
	release()
	q.respMu.Lock()
	if q.batchData > 0 || q.readsQueued > 0 || len(q.heldRecvs) > 0 {
		if q.heldRecvs == nil {
			q.heldRecvs = make([]verbs.WC, 0, 8)
		}
		q.heldRecvs = append(q.heldRecvs, wc)
		q.respMu.Unlock()
		return
	}
	q.respMu.Unlock()
	// Only the receive engine holds completions, so none can be held now
	// that ought to come before this one.
	q.recvCQ.push(wc)
}

// pushHeldRecvs completes the receives held behind read responses, in
// order, once the writer goroutine has written those; respMu held.
func (q *qp) pushHeldRecvs() { q.pushHeldRecvsN(len(q.heldRecvs)) }

// pushHeldRecvsN completes the first n receives held; respMu held.
func (q *qp) pushHeldRecvsN(n int) {
	n = min(n, len(q.heldRecvs))
	for i := range n {
		q.recvCQ.push(q.heldRecvs[i])
	}
	k := copy(q.heldRecvs, q.heldRecvs[n:])
	clear(q.heldRecvs[k:])
	q.heldRecvs = q.heldRecvs[:k]
}

// recvsAfterWrite completes the receives held behind the answers a
// request write took (held.go), now that the write is done; wrMu held.
func (q *qp) recvsAfterWrite() {
	if q.heldRecvsBehind == 0 {
		return
	}
	q.respMu.Lock()
	q.pushHeldRecvsN(q.heldRecvsBehind)
	q.respMu.Unlock()
	q.heldRecvsBehind = 0
}
