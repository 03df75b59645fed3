package soft

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// serve is the connection's reader goroutine: the NIC's receive engine
// when no waiting goroutine drives it (see rx.go). It executes the peer's
// requests against registered memory and completes this side's requests
// from the peer's responses, sleeping in the network poller in between.
func (q *qp) serve() {
	defer q.finished.Done()
	defer func() {
		// Wait for a waiting goroutine that may be inside a frame, so
		// that no memory is released under a payload being received.
		q.rxMu.Lock()
		q.rxDone = true
		q.dropFrame()
		q.rxMu.Unlock()
		q.mu.Lock()
		q.flushLocked()
		q.mu.Unlock()
	}()
	for {
		q.rxMu.Lock()
		n, ok := q.drain(false)
		// Between frames the stream may rest as long as it likes.
		q.rx.clearDeadline()
		q.rxMu.Unlock()
		if !ok {
			return
		}
		if n > 0 {
			q.ctx.prog.spinReader()
		}
		if err := q.rx.waitReadable(); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				continue // set by a frame that has ended meanwhile
			}
			q.fail(verbs.StatusTransport, q.lost(err))
			return
		}
	}
}

// target finds the region a request addresses and checks key, protection
// domain, access and bounds, as the NIC does. On success the region is
// held (inUse.RLock) and the caller must release it.
func (q *qp) target(f *frame, need verbs.Access) (*region, []byte, verbs.Status) {
	r := q.ctx.regions.lookup(f.rkey)
	if r == nil || r.pd != q.pd || r.access&need != need || r.dying.Load() {
		return nil, nil, verbs.StatusRemoteAccess
	}
	r.inUse.RLock()
	if r.dead {
		r.inUse.RUnlock()
		return nil, nil, verbs.StatusRemoteAccess
	}
	b, ok := r.slice(f.addr, uint64(f.len))
	if !ok {
		r.inUse.RUnlock()
		return nil, nil, verbs.StatusRemoteAccess
	}
	return r, b, verbs.StatusSuccess
}

// execute runs one request from the peer.
func (q *qp) execute(br frameReader, f *frame) error {
	if q.nakSent.Load() {
		// After a NAK the peer's queue pair is in error: nothing more it
		// sent is executed, only drained.
		if f.hasPayload() {
			_, err := br.Discard(int(f.len))
			return err
		}
		return nil
	}
	switch f.kind {
	case kReqWrite, kReqWriteImm:
		var (
			r  *region
			b  []byte
			st = verbs.StatusSuccess
		)
		if f.len > 0 { // zero-length writes touch no memory and check no key, as on hardware
			r, b, st = q.target(f, verbs.AccessRemoteWrite)
		}
		if st != verbs.StatusSuccess {
			return q.nak(br, f, st)
		}
		_, err := io.ReadFull(br, b)
		if r != nil {
			r.inUse.RUnlock()
		}
		if err != nil {
			return err
		}
		if f.kind == kReqWriteImm {
			if !q.deliver(nil, f, verbs.OpRecvImm) {
				return q.nak(nil, f, verbs.StatusRNR)
			}
		}
	case kReqSend:
		if !q.deliver(br, f, verbs.OpRecv) {
			return q.nak(br, f, verbs.StatusRNR)
		}
	case kReqRead:
		r, b, st := q.target(f, verbs.AccessRemoteRead)
		if st != verbs.StatusSuccess {
			return q.nak(nil, f, st)
		}
		q.respond(response{f: frame{kind: kRespRead, seq: f.seq, len: f.len}, data: b, reg: r})
		return nil
	case kReqFAA, kReqCAS:
		r, _, st := q.target(f, verbs.AccessRemoteAtomic)
		if st != verbs.StatusSuccess || f.addr%8 != 0 {
			if r != nil {
				r.inUse.RUnlock()
			}
			if st == verbs.StatusSuccess {
				st = verbs.StatusRemoteOp
			}
			return q.nak(nil, f, st)
		}
		w, _ := r.word(f.addr)
		var old uint64
		if f.kind == kReqFAA {
			old = atomic.AddUint64(w, f.arg0) - f.arg0
		} else {
			for {
				old = atomic.LoadUint64(w)
				if old != f.arg0 || atomic.CompareAndSwapUint64(w, old, f.arg1) {
					break
				}
			}
		}
		r.inUse.RUnlock()
		q.respond(response{f: frame{kind: kRespAtomic, seq: f.seq, arg0: old}})
		return nil
	}
	if f.flags&flagAck != 0 {
		q.respond(response{f: frame{kind: kRespAck, seq: f.seq}})
	}
	return nil
}

// deliver consumes the oldest posted receive for a send (payload read from
// br into its buffers) or a write with immediate (br nil), and completes it
// on the receive CQ. It returns false if no receive was posted or the
// payload does not fit (receiver not ready / length error).
func (q *qp) deliver(br frameReader, f *frame, op verbs.Opcode) bool {
	q.mu.Lock()
	if q.rn == 0 {
		q.mu.Unlock()
		return false
	}
	e := q.recvs[q.rhead]
	q.recvs[q.rhead] = recvEntry{}
	q.rhead = (q.rhead + 1) % len(q.recvs)
	q.rn--
	q.mu.Unlock()
	wc := verbs.WC{ID: e.id, Op: op, QPN: q.num, ByteLen: f.len}
	if op == verbs.OpRecvImm {
		wc.Imm, wc.HasImm = f.imm, true
	}
	if br != nil {
		left := int(f.len)
		for i := 0; i < e.nseg && left > 0; i++ {
			n := min(left, len(e.seg[i]))
			if _, err := io.ReadFull(br, e.seg[i][:n]); err != nil {
				return true // the connection is gone; serve reports it
			}
			left -= n
		}
		if left > 0 {
			br.Discard(left)
			wc.Status = verbs.StatusLocalError
		}
	}
	release()
	q.recvCQ.push(wc)
	return true
}

// nak refuses a request: its payload (if any) is drained unread into
// memory, the requester is told why, and nothing more from it runs.
func (q *qp) nak(br frameReader, f *frame, st verbs.Status) error {
	if br != nil && f.hasPayload() {
		if _, err := br.Discard(int(f.len)); err != nil {
			return err
		}
	}
	q.nakSent.Store(true)
	q.respond(response{f: frame{kind: kRespNak, seq: f.seq, status: uint8(st)}})
	return nil
}

// respond sends a response to the peer. What the responder did to memory
// is released first, so that it happens before the requester's
// completion. The goroutine running the receive engine collects the
// responses of the frames it runs and sends them together when it has run
// out of arrived frames (flushResponses), so a burst of requests is
// answered with one system call.
func (q *qp) respond(r response) {
	release()
	if q.rx == nil { // not connected (the fuzz test drives execute directly)
		q.queueResponse(r)
		return
	}
	if q.nresp == respBatch {
		q.flushResponses()
	}
	q.resps[q.nresp] = r
	q.nresp++
}

// respBatch is the most responses collected before they are sent.
const respBatch = 32

// flushResponses sends the collected responses; rxMu held. They are
// written at once if the socket takes them without blocking and nothing is
// queued before them; otherwise they (or what a partial write left) go to
// the writer goroutine, so that the receive engine never blocks on a write
// (two peers blocked writing to each other would deadlock).
func (q *qp) flushResponses() {
	n := q.nresp
	if n == 0 {
		return
	}
	q.nresp = 0
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
	q.respMu.Unlock()
	for i := range sent {
		if r := q.resps[i].reg; r != nil {
			r.inUse.RUnlock()
		}
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

// drop lets go of a response that will not be sent (the queue pair is
// closing): its region, and the write lock if it was held for it.
func (r *response) drop(q *qp) {
	if r.reg != nil {
		r.reg.inUse.RUnlock()
	}
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
	err := q.rx.rc.Write(q.writeFn)
	clear(q.iov[:n])
	if err != nil {
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

// writevOnce is writeNow's function for rc.Write: one writev(2) that never
// waits (it returns true whatever happened, and records what was written).
func (q *qp) writevOnce(fd uintptr) bool {
	for {
		k, _, e := syscall.Syscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&q.iov[0])), uintptr(q.iovN))
		if e == syscall.EINTR {
			continue
		}
		if e == 0 {
			q.wrN = int(k)
		}
		return true
	}
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
	)
	release := func(n int) {
		for i := 0; i < n; i++ {
			if regs[i] != nil {
				regs[i].inUse.RUnlock()
				regs[i] = nil
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
		release(n)
		q.respMu.Lock()
		q.respQueued -= n
		q.respMu.Unlock()
		if err != nil {
			q.fail(verbs.StatusTransport, q.sendErr("responses", err))
		}
	}
}

// goodbye handles the peer's orderly close: requests it executed complete,
// later ones fail, and this side closes its end too. The posted receives
// are flushed, as after any failure, so that whoever waits for something
// from the peer learns at once that nothing more will come (the receives
// that took what it sent before have completed already), and the cause
// says the peer closed in order (verbs.ErrPeerClosed).
func (q *qp) goodbye(f *frame) {
	q.mu.Lock()
	for q.pn > 0 && q.pend[q.phead].seq <= f.seq && q.pend[q.phead].nseg == 0 {
		q.completeHead(verbs.StatusSuccess)
	}
	q.mu.Unlock()
	q.fail(verbs.StatusTransport, fmt.Errorf("%w: %s closed its queue pair (its program called Close or ended)", verbs.ErrPeerClosed, q.peer()))
}

// complete handles a response to one of this side's requests. Responses
// arrive in request order; a response for seq completes every earlier
// request too (they were unsignaled writes that needed no answer).
func (q *qp) complete(br frameReader, f *frame) error {
	q.mu.Lock()
	for q.pn > 0 && q.pend[q.phead].seq < f.seq {
		q.completeHead(verbs.StatusSuccess)
	}
	if q.pn == 0 || q.pend[q.phead].seq != f.seq {
		q.mu.Unlock()
		return fmt.Errorf("%w: response for unknown request %d", errFrame, f.seq)
	}
	p := &q.pend[q.phead]
	switch f.kind {
	case kRespAck:
		if p.op != verbs.OpWrite && p.op != verbs.OpWriteImm && p.op != verbs.OpSend {
			q.mu.Unlock()
			return fmt.Errorf("%w: ack for a %v", errFrame, p.op)
		}
		q.completeHead(verbs.StatusSuccess)
	case kRespAtomic:
		if p.op != verbs.OpFetchAdd && p.op != verbs.OpCompareSwap {
			q.mu.Unlock()
			return fmt.Errorf("%w: atomic response for a %v", errFrame, p.op)
		}
		b := p.seg[0]
		b[0], b[1], b[2], b[3] = byte(f.arg0), byte(f.arg0>>8), byte(f.arg0>>16), byte(f.arg0>>24)
		b[4], b[5], b[6], b[7] = byte(f.arg0>>32), byte(f.arg0>>40), byte(f.arg0>>48), byte(f.arg0>>56)
		q.completeHead(verbs.StatusSuccess)
	case kRespNak:
		op := p.op
		q.mu.Unlock()
		st := verbs.Status(f.status)
		q.fail(st, fmt.Errorf("%w: %s refused request %d (%v): %s", st.Err(), q.peer(), f.seq, op, nakWhy(st)))
		return nil
	case kRespRead:
		if p.op != verbs.OpRead || p.length != f.len {
			q.mu.Unlock()
			return fmt.Errorf("%w: read response of %d bytes for a %v of %d", errFrame, f.len, p.op, p.length)
		}
		// Receive the payload without holding the lock. The entry stays
		// at the head, its regions held: only this goroutine completes or
		// flushes entries while it runs.
		segs := p.seg
		nseg := p.nseg
		q.mu.Unlock()
		for i := 0; i < nseg; i++ {
			if _, err := io.ReadFull(br, segs[i]); err != nil {
				return err
			}
		}
		q.mu.Lock()
		q.completeHead(verbs.StatusSuccess)
	}
	q.cond.Broadcast()
	q.mu.Unlock()
	return nil
}

// nakWhy explains a refusal.
func nakWhy(st verbs.Status) string {
	switch st {
	case verbs.StatusRemoteAccess:
		return "no region is registered there with that key, access and range (was the window freed, or is the target shutting down?)"
	case verbs.StatusRNR:
		return "no receive was posted"
	case verbs.StatusRemoteOp:
		return "the target could not execute it (misaligned atomic?)"
	}
	return st.String()
}
