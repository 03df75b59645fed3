package soft

import (
	"io"
	"sync"
	"unsafe"

	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/accop"
)

// Accumulates (verbs.OpAccumulate): the request carries its operand like a
// write, in a kReqAcc frame (or kReqAccFetch, whose old values come back
// like read data, in a kRespRead frame), with the reduction and element
// type in arg0. The responder applies the operand with accop, element-wise
// atomically with CPU atomics on the 8-byte words, as it runs fetch-adds
// and compare-and-swaps, so all of them are atomic against each other. A
// large operand is applied in pieces as it arrives (payload.go), straight
// from the stream's buffer; a loopback pair applies it from the poster's
// memory (loopback.go).

// maxFetchAcc is the most bytes a fetching accumulate carries: its old
// values wait in a buffer of the responder's until they are sent.
const maxFetchAcc = 64 << 10

// accChunk is the piece of an operand read at a time by a responder that
// reads it from something other than the connection's stream.
const accChunk = 64 << 10

// accState is a queue pair's responder buffers for accumulates.
type accState struct {
	mu      sync.Mutex
	free    [][]byte // fetch buffers (maxFetchAcc each) not in use
	small   [][]byte // the same for up to smallRead bytes (a small read's copy)
	scratch []byte   // operand pieces (executeAcc); used by the stream's owner only
}

// fetchBuf takes a buffer for a fetching accumulate's old values, or a
// small read's data (at most smallRead bytes). Buffers are allocated once
// and reused: at most one per such request the peer has outstanding.
func (q *qp) fetchBuf(n uint32) []byte {
	a := &q.acc
	list, size := &a.free, maxFetchAcc
	if n <= smallRead {
		list, size = &a.small, smallRead
	}
	a.mu.Lock()
	var b []byte
	if k := len(*list); k > 0 {
		b = (*list)[k-1]
		(*list)[k-1] = nil
		*list = (*list)[:k-1]
	}
	a.mu.Unlock()
	if b == nil {
		b = make([]byte, size)
	}
	return b[:n]
}

// putFetchBuf returns a fetch buffer once its response is sent or dropped.
func (q *qp) putFetchBuf(b []byte) {
	a := &q.acc
	a.mu.Lock()
	if cap(b) == smallRead {
		a.small = append(a.small, b[:cap(b)])
	} else {
		a.free = append(a.free, b[:cap(b)])
	}
	a.mu.Unlock()
}

// accOf is an accumulate frame's reduction and element type.
func accOf(f *frame) (verbs.AccOp, verbs.ElemType) {
	return verbs.AccOp(f.arg0), verbs.ElemType(f.arg0 >> 8)
}

// isAcc reports whether kind is an accumulate request.
func isAcc(kind uint8) bool { return kind == kReqAcc || kind == kReqAccFetch }

// readsData reports whether the request's response carries data into its
// local segments: a read, or a fetching accumulate's old values.
func (p *pending) readsData() bool {
	return p.op == verbs.OpRead || p.op == verbs.OpAccumulate && p.fetch
}

// prepAccumulate checks an OpAccumulate work request (verbs.CheckAccumulate,
// then its local keys) and fills in its frame and bookkeeping: the operand is
// sent like a write's payload, and a fetching one's SGL also receives the old
// values, like a read's. It returns the request's length.
func (q *qp) prepAccumulate(wr *verbs.SendWR, f *frame, p *pending, payload *[maxSGE][]byte) (uint64, error) {
	if err := verbs.CheckAccumulate(wr, maxFetchAcc); err != nil {
		return 0, err
	}
	a := wr.Acc
	need := verbs.Access(0)
	if a.Fetch {
		need = verbs.AccessLocalWrite
	}
	var total uint64
	for i, s := range wr.SGL {
		r, b, err := q.resolve(s, need)
		if err != nil {
			return 0, err
		}
		payload[i] = b
		if a.Fetch {
			p.reg[i], p.seg[i] = r, b
		}
		total += uint64(s.Length)
	}
	f.arg0 = uint64(a.Op) | uint64(a.Type)<<8
	f.kind = kReqAcc
	if a.Fetch {
		f.kind = kReqAccFetch
		p.nseg, p.fetch = len(wr.SGL), true
	} else if p.signaled {
		f.flags = flagAck
	}
	return total, nil
}

// accTarget checks an accumulate as the NIC checks an atomic: key,
// protection domain, remote atomic access, and bounds of the 8-byte words
// holding the elements; then the elements' alignment. On success the
// region is held (inUse.RLock) and the pointer is the first element.
func (q *qp) accTarget(f *frame) (*region, unsafe.Pointer, verbs.Status) {
	_, t := accOf(f)
	lo := f.addr &^ 7
	hi := f.addr + uint64(f.len)
	if hi < f.addr || hi > ^uint64(0)-7 {
		return nil, nil, verbs.StatusRemoteAccess
	}
	hi = (hi + 7) &^ 7
	g := *f
	g.addr, g.len = lo, uint32(hi-lo)
	r, b, st := q.target(&g, verbs.AccessRemoteAtomic)
	if st != verbs.StatusSuccess {
		return nil, nil, st
	}
	if es := uint64(t.Size()); f.addr%es != 0 || uint64(f.len)%es != 0 {
		r.inUse.RUnlock()
		return nil, nil, verbs.StatusRemoteOp
	}
	return r, unsafe.Pointer(&b[f.addr-lo]), verbs.StatusSuccess
}

// accDone answers an executed accumulate: a fetching one with its old
// values (from a fetch buffer, returned once sent), another with an
// acknowledgement if asked.
func (q *qp) accDone(f *frame, old []byte) {
	if f.kind == kReqAccFetch {
		q.respond(response{f: frame{kind: kRespRead, seq: f.seq, len: f.len}, data: old, pooled: old != nil})
	} else if f.flags&flagAck != 0 {
		q.respond(response{f: frame{kind: kRespAck, seq: f.seq}})
	}
}

// executeAcc runs an accumulate whose operand is read from br (a reader
// other than the connection's stream, or no operand: AccNoOp) or that
// carries nothing (length 0, which touches no memory and checks no key, as
// a zero-length write).
func (q *qp) executeAcc(br frameReader, f *frame) error {
	if f.len == 0 {
		q.accDone(f, nil)
		return nil
	}
	r, dst, st := q.accTarget(f)
	if st != verbs.StatusSuccess {
		return q.nak(br, f, st)
	}
	op, t := accOf(f)
	var old []byte
	if f.kind == kReqAccFetch {
		old = q.fetchBuf(f.len)
	}
	n := int(f.len)
	if !f.hasPayload() {
		accop.Apply(dst, n, nil, old, op, t)
	} else {
		if q.acc.scratch == nil {
			q.acc.scratch = make([]byte, accChunk) // once per queue pair
		}
		for off := 0; off < n; {
			k := min(accChunk, n-off) // whole elements: accChunk is a multiple of 8
			src := q.acc.scratch[:k]
			if _, err := io.ReadFull(br, src); err != nil {
				r.inUse.RUnlock()
				if old != nil {
					q.putFetchBuf(old)
				}
				return err
			}
			var o []byte
			if old != nil {
				o = old[off : off+k]
			}
			accop.Apply(unsafe.Add(dst, off), k, src, o, op, t)
			off += k
		}
	}
	r.inUse.RUnlock()
	q.accDone(f, old)
	return nil
}

// beginAcc starts applying an accumulate's operand as it arrives on the
// stream (resume); the checks are executeAcc's.
func (q *qp) beginAcc(f *frame) error {
	c := &q.cur
	r, dst, st := q.accTarget(f)
	if st != verbs.StatusSuccess {
		c.left = int(f.len)
		return q.nak(nil, f, st)
	}
	c.reg, c.acc, c.accDst, c.accN = r, true, dst, int(f.len)
	c.accOp, c.accType = accOf(f)
	if f.kind == kReqAccFetch {
		c.accOld = q.fetchBuf(f.len)
	}
	q.curReg.Store(r)
	return nil
}

// resumeAcc applies the whole elements of the operand that have arrived,
// from the stream's buffer; rxMu held. It returns errAgain when it needs
// more.
func (q *qp) resumeAcc(s *rxStream) error {
	c := &q.cur
	es := c.accType.Size()
	k := min(s.buffered(), c.accN-c.accOff)
	k -= k % es
	if k == 0 {
		return s.fill()
	}
	var o []byte
	if c.accOld != nil {
		o = c.accOld[c.accOff : c.accOff+k]
	}
	accop.Apply(unsafe.Add(c.accDst, c.accOff), k, s.buf[s.r:s.r+k], o, c.accOp, c.accType)
	s.r += k
	c.accOff += k
	return nil
}

// executeLoopAcc runs a loopback accumulate: the operand is applied from
// the poster's memory, and a fetching one's old values replace it there.
func (q *qp) executeLoopAcc(f *frame, p *pending, payload *[maxSGE][]byte, nseg int) verbs.Status {
	if f.len == 0 {
		return verbs.StatusSuccess
	}
	r, dst, st := q.accTarget(f)
	if st != verbs.StatusSuccess {
		return st
	}
	op, t := accOf(f)
	off := 0
	for _, s := range payload[:nseg] {
		var old []byte
		if p.fetch {
			old = s
		}
		accop.Apply(unsafe.Add(dst, off), len(s), s, old, op, t)
		off += len(s)
	}
	r.inUse.RUnlock()
	return verbs.StatusSuccess
}
