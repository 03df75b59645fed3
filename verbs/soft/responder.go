package soft

import (
	"io"

	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/accop"
)

// The responder: what the NIC does for the peer's requests. It checks the
// rkey, protection domain, access and bounds of each request, then writes,
// reads, runs the atomic or applies the accumulate (accumulate.go) on
// registered memory; the requests of a
// loopback pair (loopback.go) run through the same functions.

// target finds the region a request addresses and checks key, protection
// domain, access and bounds, as the NIC does. On success the region is
// held (inUse.RLock) and the caller must release it.
func (q *qp) target(f *frame, need verbs.Access) (*region, []byte, verbs.Status) {
	r := q.ctx.regions.Lookup(f.rkey)
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

// writeTarget checks a write request and returns the memory it writes,
// held (inUse.RLock) when r is not nil: a zero-length write touches no
// memory and checks no key, as on hardware.
func (q *qp) writeTarget(f *frame) (r *region, b []byte, st verbs.Status) {
	if f.len == 0 {
		return nil, nil, verbs.StatusSuccess
	}
	return q.target(f, verbs.AccessRemoteWrite)
}

// executeAtomic runs a fetch-add or compare-swap request on the word it
// addresses and returns the word's old value, or the status that refuses
// it (nothing changed).
func (q *qp) executeAtomic(f *frame) (uint64, verbs.Status) {
	r, _, st := q.target(f, verbs.AccessRemoteAtomic)
	if st != verbs.StatusSuccess {
		return 0, st
	}
	if f.addr%8 != 0 {
		r.inUse.RUnlock()
		return 0, verbs.StatusRemoteOp
	}
	w, _ := r.word(f.addr)
	var old uint64
	if f.kind == kReqFAA {
		old = accop.FetchAdd(w, f.arg0)
	} else {
		old = accop.CompareSwap(w, f.arg0, f.arg1)
	}
	r.inUse.RUnlock()
	return old, verbs.StatusSuccess
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
		if q.skipped(f) {
			if _, err := br.Discard(int(f.len)); err != nil {
				return err
			}
			break
		}
		r, b, st := q.writeTarget(f)
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
		if f.len <= smallRead {
			// Copied now, so that the answer may wait for this side's
			// next request (held.go) without holding the memory.
			c := q.fetchBuf(f.len)
			copy(c, b)
			r.inUse.RUnlock()
			q.respond(response{f: frame{kind: kRespRead, seq: f.seq, len: f.len}, data: c, pooled: true})
			return nil
		}
		q.respond(response{f: frame{kind: kRespRead, seq: f.seq, len: f.len}, data: b, reg: r})
		return nil
	case kReqFAA, kReqCAS:
		old, st := q.executeAtomic(f)
		if st != verbs.StatusSuccess {
			return q.nak(nil, f, st)
		}
		q.guardAtomic(f, old)
		q.respond(response{f: frame{kind: kRespAtomic, seq: f.seq, arg0: old}})
		return nil
	case kReqAcc, kReqAccFetch:
		return q.executeAcc(br, f)
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
	if q.recvs.Len() == 0 {
		q.mu.Unlock()
		return false
	}
	e := q.recvs.Pop()
	q.mu.Unlock()
	wc := verbs.WC{ID: e.ID, Op: op, QPN: q.num, ByteLen: f.len}
	if op == verbs.OpRecvImm {
		wc.Imm, wc.HasImm = f.imm, true
	}
	if br != nil {
		left := int(f.len)
		for i := 0; i < e.NSeg && left > 0; i++ {
			n := min(left, len(e.Seg[i]))
			if _, err := io.ReadFull(br, e.Seg[i][:n]); err != nil {
				return true // the connection is gone; serve reports it
			}
			left -= n
		}
		if left > 0 {
			br.Discard(left)
			wc.Status = verbs.StatusLocalError
		}
	}
	q.completeRecv(wc)
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
