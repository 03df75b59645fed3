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
// Atomics, fetching accumulates and reads of up to smallRead bytes answer
// with values copied when they run, and need nothing.

// completeRecv puts a receive completion on the receive CQ once every read
// response executed before it has left registered memory; rxMu held (or
// a loopback pair, which reads by copying and queues no response).
func (q *qp) completeRecv(wc verbs.WC) {
	release()
	q.respMu.Lock()
	if q.batchReads > 0 || q.readsQueued > 0 || len(q.heldRecvs) > 0 {
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
func (q *qp) pushHeldRecvs() {
	for i := range q.heldRecvs {
		q.recvCQ.push(q.heldRecvs[i])
	}
	clear(q.heldRecvs)
	q.heldRecvs = q.heldRecvs[:0]
}
