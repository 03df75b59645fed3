package soft

import (
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// Large payloads in pieces. A waiting goroutine (the process's poller)
// must never wait for one peer's data while others have work: it runs a
// frame only when the frame has arrived whole (rxStream.frameReady), except
// the payload of a large write or read response, which it receives as it
// arrives, across calls: it takes what is there, keeps its place in
// qp.cur, and goes back to polling. The next owner of the stream (a
// waiting goroutine, or the reader goroutine, which waits for the rest with
// the context's deadline) goes on from there. Receiving a large put in the
// goroutine that polls anyway, instead of waking the reader goroutine for
// it, is what keeps a fence over large puts as fast as before.

// resumeMin is the smallest payload received in pieces: half the stream's
// buffer, the size read straight from the socket into its destination.
const resumeMin = 32 << 10

// handOverAfter is how long a waiting goroutine leaves a frame that makes
// no progress before it hands it to the reader goroutine, whose deadline
// then notices a peer that stopped sending it.
const handOverAfter = time.Millisecond

// inFrame is a frame whose payload is being received across calls. It
// belongs to the owner of the stream (rxMu).
type inFrame struct {
	active bool
	read   bool // a read response; else a write request
	f      frame
	dst    [maxSGE][]byte // where the rest of the payload goes
	nseg   int
	i      int
	left   int     // bytes to drain unread (a refused request's payload)
	reg    *region // a write's or accumulate's target region, held until the payload is in
	// An accumulate's operand is applied as it arrives (accumulate.go).
	acc     bool
	accDst  unsafe.Pointer // the first target element
	accN    int            // operand bytes
	accOff  int            // bytes applied so far
	accOp   verbs.AccOp
	accType verbs.ElemType
	accOld  []byte // a fetching accumulate's old values (a fetch buffer)
}

// resumable reports whether f, just read from fr, is received in pieces.
func (q *qp) resumable(fr frameReader, f *frame) bool {
	if q.rx == nil || fr != frameReader(q.rx) {
		return false
	}
	if isAcc(f.kind) {
		// Any accumulate with an operand: it is applied from the stream's
		// buffer, so that nothing is copied twice.
		return f.len > 0 && f.hasPayload()
	}
	return f.len >= resumeMin && (f.kind == kReqWrite || f.kind == kReqWriteImm || f.kind == kRespRead)
}

// begin starts receiving f's payload in pieces: it checks f as execute or
// complete would and records where the payload goes.
func (q *qp) begin(f *frame) error {
	c := &q.cur
	*c = inFrame{active: true, f: *f}
	if f.kind == kRespRead {
		q.mu.Lock()
		for q.pn > 0 && q.pend[q.phead].seq < f.seq {
			q.completeHead(verbs.StatusSuccess)
		}
		if q.pn == 0 || q.pend[q.phead].seq != f.seq || !q.pend[q.phead].readsData() || q.pend[q.phead].length != f.len {
			q.mu.Unlock()
			c.active = false
			return fmt.Errorf("%w: read response %d of %d bytes matches no read", errFrame, f.seq, f.len)
		}
		// The entry stays at the head, its regions held: only the owner
		// of the stream completes or flushes entries while it runs.
		p := &q.pend[q.phead]
		c.read, c.dst, c.nseg = true, p.seg, p.nseg
		q.mu.Unlock()
		return nil
	}
	if q.nakSent.Load() {
		c.left = int(f.len) // after a NAK, nothing more is executed
		return nil
	}
	if isAcc(f.kind) {
		return q.beginAcc(f)
	}
	r, b, st := q.target(f, verbs.AccessRemoteWrite)
	if st != verbs.StatusSuccess {
		c.left = int(f.len)
		return q.nak(nil, f, st)
	}
	c.reg, c.dst[0], c.nseg = r, b, 1
	q.curReg.Store(r)
	return nil
}

// resume receives more of the current frame's payload; rxMu held. A
// waiting goroutine takes what has arrived and returns false if more is to
// come; the reader goroutine waits for it (bounded by the context's
// timeout). It returns true once the frame is done.
func (q *qp) resume(waiter bool) (bool, error) {
	c, s := &q.cur, q.rx
	empty := 0
	for {
		var err error
		switch {
		case c.left > 0:
			k := min(c.left, s.buffered())
			s.r += k
			c.left -= k
			if c.left > 0 {
				err = s.fill()
			}
		case c.acc && c.accOff < c.accN:
			err = q.resumeAcc(s)
		case c.i < c.nseg:
			d := c.dst[c.i]
			var k int
			if len(d) > 0 {
				k, err = s.readSome(d)
			}
			if c.dst[c.i] = d[k:]; len(c.dst[c.i]) == 0 {
				c.i++
			}
		default:
			q.finish()
			return true, nil
		}
		if err == errAgain {
			if !waiter {
				if err := s.await(&empty); err != nil {
					return false, err
				}
				continue
			}
			// The rest usually follows within a few yields: keep the
			// frame (and the reader goroutine off it) that long.
			if empty == 0 {
				q.sendResponses()
			}
			if empty++; empty > midFrameSpin {
				return false, nil
			}
			runtime.Gosched()
		} else if err != nil {
			return false, err
		}
	}
}

// finish completes the current frame once its payload is in.
func (q *qp) finish() {
	c := &q.cur
	f, reg, read, old := c.f, c.reg, c.read, c.accOld
	*c = inFrame{}
	if read {
		q.mu.Lock()
		q.completeHead(verbs.StatusSuccess)
		q.cond.Broadcast()
		q.mu.Unlock()
		return
	}
	if reg != nil { // executed (else refused, or after a NAK: drained)
		q.curReg.Store(nil)
		reg.inUse.RUnlock()
		if isAcc(f.kind) {
			q.accDone(&f, old)
		} else if f.kind == kReqWriteImm && !q.deliver(nil, &f, verbs.OpRecvImm) {
			q.nak(nil, &f, verbs.StatusRNR)
		} else if f.flags&flagAck != 0 {
			q.respond(response{f: frame{kind: kRespAck, seq: f.seq}})
		}
	}
	q.lastExec.Store(f.seq)
}

// dropFrame lets go of a frame left unfinished by a failure; rxMu held.
// A read response's entry is flushed with the others.
func (q *qp) dropFrame() {
	if r := q.cur.reg; r != nil {
		q.curReg.Store(nil)
		r.inUse.RUnlock()
	}
	if q.cur.accOld != nil {
		q.putFetchBuf(q.cur.accOld)
	}
	q.cur = inFrame{}
}

// readSome reads what has arrived into p, without blocking: from the
// buffer, else straight from the socket if p is large, else through the
// buffer. It returns errAgain if nothing has.
func (s *rxStream) readSome(p []byte) (int, error) {
	if s.buffered() == 0 {
		if len(p) >= len(s.buf)/2 {
			return s.sysRead(p)
		}
		if err := s.fill(); err != nil {
			return 0, err
		}
	}
	n := copy(p, s.buf[s.r:s.w])
	s.r += n
	return n, nil
}

// idle is called when a waiting goroutine leaves a frame that has not
// arrived whole: once the stream has made no progress for handOverAfter,
// the reader goroutine takes the frame.
func (s *rxStream) idle() {
	now := time.Now()
	if s.got != s.idleGot || s.idleSince.IsZero() {
		s.idleGot, s.idleSince = s.got, now
		return
	}
	if now.Sub(s.idleSince) >= handOverAfter {
		s.handOver()
	}
}
