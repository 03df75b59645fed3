package soft

import (
	"fmt"
	"io"

	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/internal/recvq"
)

// The requester: posting work requests (each becomes a request frame on
// the connection, or runs at once on a loopback pair) and receives, and
// completing this side's requests from the peer's responses.

// pending is a posted send request awaiting its response or a later
// cumulative acknowledgement.
type pending struct {
	seq      uint64
	id       uint64
	op       verbs.Opcode
	signaled bool
	fetch    bool // a fetching accumulate: its response carries the old values (accumulate.go)
	length   uint32
	nseg     int
	seg      [maxSGE][]byte  // read and atomic destinations
	reg      [maxSGE]*region // held (inUse.RLock) until completion
}

// resolve maps a local SGE to bytes of a registered region of this PD.
func (q *qp) resolve(s verbs.SGE, need verbs.Access) (*region, []byte, error) {
	r := q.ctx.regions.Lookup(s.LKey)
	if r == nil || r.pd != q.pd || r.access&need != need || r.dying.Load() {
		return nil, nil, fmt.Errorf("%w: lkey %#x", verbs.ErrLocalAccess, s.LKey)
	}
	b, ok := r.slice(s.Addr, uint64(s.Length))
	if !ok {
		return nil, nil, fmt.Errorf("%w: [%#x,+%d) outside region", verbs.ErrLocalAccess, s.Addr, s.Length)
	}
	return r, b, nil
}

// PostSend posts a chain of work requests. Their frames go out together,
// postBatch at a time, in one gather write each, as a NIC fetches a chain
// with one doorbell; small unsignalled requests wait in the cork for the
// next one that is sent (coalesce.go).
func (q *qp) PostSend(first *verbs.SendWR) (*verbs.SendWR, error) {
	bad, err := q.postSend(first)
	if q.loop != nil {
		q.ctx.prog.loopPosted()
	}
	return bad, err
}

// postSend is PostSend under sendMu.
func (q *qp) postSend(first *verbs.SendWR) (*verbs.SendWR, error) {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	if first.Next == nil && q.mergeFast(first) {
		return nil, nil
	}
	for wr := first; wr != nil; wr = wr.Next {
		if err := q.postOne(wr); err != nil {
			q.sendQueued()
			return wr, err
		}
	}
	if q.nframes > 0 {
		q.sendQueued() // with the cork before its frames
	}
	return nil, nil
}

// sendQueued writes the cork and the frames encoded so far; sendMu held.
func (q *qp) sendQueued() {
	q.uncork()
	if q.nbufs == 0 {
		return
	}
	q.wrMu.Lock()
	bufs, ok := q.withHeldAnswers(q.bufs[:q.nbufs])
	var err error
	if !ok {
		bufs, err = q.answersFirst(bufs)
	}
	if err == nil {
		err = q.writeLocked(bufs)
	}
	if &bufs[0] == &q.withHeld[0] {
		clear(bufs)
		q.recvsAfterWrite()
	}
	q.wrMu.Unlock()
	clear(q.bufs[:q.nbufs])
	q.nframes, q.nbufs = 0, 0
	q.corkSent()
	if err != nil {
		q.fail(verbs.StatusTransport, q.sendErr("requests", err))
		// The requests are recorded and have been flushed with an error
		// completion; posting itself succeeded, as on hardware.
	}
}

func (q *qp) postOne(wr *verbs.SendWR) error {
	if len(wr.SGL) > maxSGE {
		return fmt.Errorf("%w: %d SGEs", verbs.ErrInvalid, len(wr.SGL))
	}
	f := frame{seq: q.nextSeq + 1, addr: wr.RemoteAddr, rkey: wr.RKey}
	p := pending{id: wr.ID, op: wr.Op, signaled: wr.Flags&verbs.Signaled != 0}
	var payload [maxSGE][]byte // a write's or send's data
	var total uint64
	switch wr.Op {
	case verbs.OpWrite, verbs.OpWriteImm, verbs.OpSend:
		f.kind = kReqWrite
		if wr.Op == verbs.OpWriteImm {
			f.kind = kReqWriteImm
		} else if wr.Op == verbs.OpSend {
			f.kind = kReqSend
		}
		f.imm = wr.Imm
		if p.signaled {
			f.flags |= flagAck
		}
		for i, s := range wr.SGL {
			_, b, err := q.resolve(s, 0)
			if err != nil {
				return err
			}
			payload[i] = b
			total += uint64(s.Length)
		}
	case verbs.OpRead:
		f.kind = kReqRead
		for i, s := range wr.SGL {
			r, b, err := q.resolve(s, verbs.AccessLocalWrite)
			if err != nil {
				return err
			}
			p.reg[i], p.seg[i] = r, b
			total += uint64(s.Length)
		}
		p.nseg = len(wr.SGL)
	case verbs.OpFetchAdd, verbs.OpCompareSwap:
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 || wr.RemoteAddr%8 != 0 {
			return fmt.Errorf("%w: atomics take one 8-byte SGE and an 8-byte aligned remote address", verbs.ErrInvalid)
		}
		r, b, err := q.resolve(wr.SGL[0], verbs.AccessLocalWrite)
		if err != nil {
			return err
		}
		p.reg[0], p.seg[0], p.nseg = r, b, 1
		f.kind, f.arg0, f.arg1, total = kReqFAA, wr.CompareAdd, 0, 8
		if wr.Op == verbs.OpCompareSwap {
			f.kind, f.arg1 = kReqCAS, wr.Swap
		} else if wr.Flags&(verbs.GuardSet|verbs.GuardAnd) != 0 {
			f.arg1 = wr.GuardMask
		}
	case verbs.OpAccumulate:
		n, err := q.prepAccumulate(wr, &f, &p, &payload)
		if err != nil {
			return err
		}
		total = n
	default:
		return fmt.Errorf("%w: opcode %v", verbs.ErrInvalid, wr.Op)
	}
	if total > maxPayload {
		return fmt.Errorf("%w: %d bytes in one request (max %d)", verbs.ErrInvalid, total, maxPayload)
	}
	f.len = uint32(total)
	p.length = f.len
	if wr.Flags&(verbs.GuardSet|verbs.GuardAnd|verbs.Guarded) != 0 {
		fl, err := guardFlags(wr, total)
		if err != nil {
			return err
		}
		if q.loop != nil {
			return fmt.Errorf("%w: guards on a queue pair to this process", verbs.ErrInvalid)
		}
		f.flags |= fl
	}
	if q.loop != nil {
		return q.postLoop(&f, &p, &payload, len(wr.SGL))
	}

	if wr.Flags&verbs.Fence != 0 {
		q.sendQueued() // the reads it waits for may still be in the batch
	}
	q.mu.Lock()
	for wr.Flags&verbs.Fence != 0 && q.ordered > 0 && q.state == stRTS {
		q.cond.Wait()
	}
	if q.state != stRTS {
		err := q.stateErr()
		q.mu.Unlock()
		return err
	}
	if q.pn == len(q.pend) {
		pn := q.pn
		q.mu.Unlock()
		return fmt.Errorf("%w: %d send requests outstanding", verbs.ErrQueueFull, pn)
	}
	for i := 0; i < p.nseg; i++ {
		p.reg[i].inUse.RLock()
	}
	q.nextSeq++
	p.seq = q.nextSeq
	q.pend[(q.phead+q.pn)%len(q.pend)] = p
	q.pn++
	if p.nseg > 0 {
		q.ordered++
	}
	q.mu.Unlock()

	coalesce := wr.Flags&verbs.Coalesce != 0
	if coalesce && awaitedKind(f.kind) && !q.ctx.hold.mayHold() {
		coalesce = false // the program leaves such traffic behind (hold.go)
	}
	if f.flags&flagGuarded == 0 && coalescable(f.kind, p.signaled, wr.Flags&verbs.Fence != 0, coalesce, total) {
		if coalesce && awaitedKind(f.kind) {
			q.corkAwaited++
		}
		q.corkFrame(&f, &payload, len(wr.SGL))
		release()
		return nil
	}
	// Queue the frame for the batch's gather write, after the cork.
	q.uncork()
	h := &q.hdrs[q.nframes]
	f.encode(h)
	release()
	q.bufs[q.nbufs] = h[:]
	q.nbufs++
	if f.hasPayload() {
		for i := range wr.SGL {
			q.bufs[q.nbufs] = payload[i]
			q.nbufs++
		}
	}
	q.nframes++
	if q.nframes == postBatch {
		q.sendQueued()
	}
	return nil
}

func (q *qp) PostRecv(first *verbs.RecvWR) (*verbs.RecvWR, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for wr := first; wr != nil; wr = wr.Next {
		if q.state == stError {
			return wr, q.stateErr()
		}
		if len(wr.SGL) > recvq.MaxSGE {
			return wr, fmt.Errorf("%w: %d SGEs", verbs.ErrInvalid, len(wr.SGL))
		}
		if q.recvs.Full() || q.maxRecv == 0 {
			return wr, fmt.Errorf("%w: %d receives posted", verbs.ErrQueueFull, q.recvs.Len())
		}
		e := recvq.Entry{ID: wr.ID, NSeg: len(wr.SGL)}
		for i, s := range wr.SGL {
			_, b, err := q.resolve(s, verbs.AccessLocalWrite)
			if err != nil {
				return wr, err
			}
			e.Seg[i] = b
		}
		q.recvs.Push(&e)
	}
	return nil, nil
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
		if p.op != verbs.OpWrite && p.op != verbs.OpWriteImm && p.op != verbs.OpSend && (p.op != verbs.OpAccumulate || p.fetch) {
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
		if !p.readsData() || p.length != f.len {
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
