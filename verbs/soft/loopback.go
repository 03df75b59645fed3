package soft

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/rmago/rmago/verbs"
)

// Loopback: a queue pair connected to another queue pair of the same
// context (a rank's connection to itself) executes each request at once,
// in the posting goroutine, with the responder's own checks and atomics,
// as a NIC's loopback does without touching the wire. The TCP connection
// of the pair stays idle. A local access (a lock word, an accumulate or a
// notification to the rank itself) then costs a function call instead of
// two trips through the socket, and still goes through the same agent as
// the peers' accesses (the responder's code and sync/atomic).

// loopPollEvery is how many loopback requests a process posts between two
// runs of its receive engines by the poster (progress.loopPosted).
const loopPollEvery = 16

// loopPosted counts a request posted on a loopback queue pair, and every
// loopPollEvery of them runs what the peers have sent, as a waiting
// goroutine does. A goroutine whose requests all run on the loopback
// queue pair never waits (they complete in PostSend), so nothing else may
// run on the processor it holds (GOMAXPROCS=1, the share rmarun gives each
// rank of a full node): a rank spinning on a compare-and-swap of its own
// window's lock word would otherwise never let the reader goroutines run
// the peer's release it waits for.
func (g *progress) loopPosted() {
	if g.loops.Add(1)%loopPollEvery == 0 {
		g.pollAll()
	}
}

// loopPeer returns the queue pair of this context that remote names, if
// any.
func (q *qp) loopPeer(remote verbs.Endpoint) *qp {
	if remote.Addr != q.ctx.ln.Addr().String() {
		return nil
	}
	q.ctx.mu.Lock()
	defer q.ctx.mu.Unlock()
	return q.ctx.qps[remote.QPN]
}

// postLoop executes a request on a loopback queue pair; sendMu held. p is
// the request's bookkeeping (local destinations resolved), payload a write's
// or send's data.
func (q *qp) postLoop(f *frame, p *pending, payload *[maxSGE][]byte, nseg int) error {
	if err := q.sendable(); err != nil {
		return err
	}
	for i := 0; i < p.nseg; i++ {
		p.reg[i].inUse.RLock()
	}
	release()
	st := q.loop.executeLoop(f, p, payload, nseg)
	for i := 0; i < p.nseg; i++ {
		p.reg[i].inUse.RUnlock()
	}
	if st != verbs.StatusSuccess {
		// A refused request completes with its status and, as after a NAK,
		// both queue pairs enter the error state.
		q.sendCQ.push(verbs.WC{ID: p.id, Status: st, Op: p.op, ByteLen: p.length, QPN: q.num})
		q.fail(verbs.StatusFlushed, fmt.Errorf("%w: loopback request %d (%v) refused: %s", st.Err(), p.id, p.op, nakWhy(st)))
		return nil
	}
	if p.signaled {
		q.sendCQ.push(verbs.WC{ID: p.id, Status: verbs.StatusSuccess, Op: p.op, ByteLen: p.length, QPN: q.num})
	}
	return nil
}

// executeLoop runs a loopback request as this queue pair's responder would
// run it from the wire: through the same checks and the same functions
// (responder.go), with the payload copied between memories instead of read
// from the socket.
func (q *qp) executeLoop(f *frame, p *pending, payload *[maxSGE][]byte, nseg int) verbs.Status {
	switch f.kind {
	case kReqWrite, kReqWriteImm:
		r, b, st := q.writeTarget(f)
		if st != verbs.StatusSuccess {
			return st
		}
		if r != nil {
			for _, s := range payload[:nseg] {
				b = b[copy(b, s):]
			}
			r.inUse.RUnlock()
		}
		if f.kind == kReqWriteImm && !q.deliver(nil, f, verbs.OpRecvImm) {
			return verbs.StatusRNR
		}
	case kReqSend:
		src := &segReader{} // allocated, but only for sends (not on the data path)
		src.segs = src.arr[:copy(src.arr[:], payload[:nseg])]
		if !q.deliver(src, f, verbs.OpRecv) {
			return verbs.StatusRNR
		}
	case kReqRead:
		r, b, st := q.target(f, verbs.AccessRemoteRead)
		if st != verbs.StatusSuccess {
			return st
		}
		for _, d := range p.seg[:p.nseg] {
			b = b[copy(d, b):]
		}
		r.inUse.RUnlock()
	case kReqFAA, kReqCAS:
		old, st := q.executeAtomic(f)
		if st != verbs.StatusSuccess {
			return st
		}
		binary.LittleEndian.PutUint64(p.seg[0], old)
	case kReqAcc, kReqAccFetch:
		if st := q.executeLoopAcc(f, p, payload, nseg); st != verbs.StatusSuccess {
			return st
		}
	}
	release()
	return verbs.StatusSuccess
}

// segReader reads a send's payload from the sender's segments.
type segReader struct {
	arr  [maxSGE][]byte
	segs [][]byte
}

func (s *segReader) Read(p []byte) (int, error) {
	n := 0
	for n < len(p) && len(s.segs) > 0 {
		k := copy(p[n:], s.segs[0])
		n += k
		if s.segs[0] = s.segs[0][k:]; len(s.segs[0]) == 0 {
			s.segs = s.segs[1:]
		}
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

func (s *segReader) Discard(n int) (int, error) {
	done := 0
	for done < n && len(s.segs) > 0 {
		k := min(n-done, len(s.segs[0]))
		done += k
		if s.segs[0] = s.segs[0][k:]; len(s.segs[0]) == 0 {
			s.segs = s.segs[1:]
		}
	}
	return done, nil
}
