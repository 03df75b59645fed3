package soft

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rmago/rmago/internal/auth"
	"github.com/rmago/rmago/verbs"
)

// maxSGE is the most scatter-gather entries a request may carry.
const maxSGE = 4

// postBatch is the most frames of one chain of work requests sent in one
// gather write (one system call).
const postBatch = 32

// ConnectTimeout bounds how long Connect waits for the peer's side.
var ConnectTimeout = 60 * time.Second

const authRole = "rmago-soft-qp"

// Queue pair states.
const (
	stInit = iota
	stRTS
	stError
)

// pending is a posted send request awaiting its response or a later
// cumulative acknowledgement.
type pending struct {
	seq      uint64
	id       uint64
	op       verbs.Opcode
	signaled bool
	length   uint32
	nseg     int
	seg      [maxSGE][]byte  // read and atomic destinations
	reg      [maxSGE]*region // held (inUse.RLock) until completion
}

// recvEntry is a posted receive request.
type recvEntry struct {
	id   uint64
	nseg int
	seg  [maxSGE][]byte
}

// response is something the responder sends back, queued for the
// connection's writer goroutine so that the reader never blocks on a write.
type response struct {
	f    frame
	data []byte  // read response payload, straight from registered memory
	reg  *region // released (inUse.RUnlock) once data is on the wire
	off  int     // bytes of header and data already written
	held bool    // off > 0 and the write lock is held for the rest (see flushResponses)
}

type qp struct {
	ctx     *context
	pd      *pd
	num     uint32
	sendCQ  *cq
	recvCQ  *cq
	maxSend int
	maxRecv int
	connCh  chan acceptedConn // authenticated connections from the listener

	// connMu makes an on-demand connection's acceptance and Dial's start
	// exclusive (connmgr.go); dialing is set, under it, once Dial started.
	connMu  sync.Mutex
	dialing bool

	// loop is the peer queue pair when it belongs to this context: requests
	// then execute at once (loopback.go). Set at Connect, under sendMu.
	loop *qp

	// sendMu serializes posting: sequence order is wire order.
	sendMu sync.Mutex
	hdr    [hdrLen]byte // the goodbye frame's header
	// A chain of requests leaves in one gather write: up to postBatch
	// frames are encoded here before the write.
	hdrs    [postBatch][hdrLen]byte
	bufs    [postBatch * (1 + maxSGE)][]byte
	nframes int
	nbufs   int
	nextSeq uint64

	// mu guards the state, the pending ring and the receive ring; cond
	// wakes posters waiting for earlier reads (the Fence flag).
	mu         sync.Mutex
	cond       sync.Cond
	state      int
	conn       net.Conn
	remote     verbs.Endpoint
	pend       []pending
	phead      int
	pn         int
	ordered    int // pending reads and atomics, for Fence
	recvs      []recvEntry
	rhead      int
	rn         int
	failErr    error
	failStatus verbs.Status
	respCh     chan response
	done       chan struct{}
	nakSent    atomic.Bool
	lastExec   atomic.Uint64 // the peer's last request this side executed
	finished   sync.WaitGroup

	// The receive engine (rx.go): whoever holds rxMu reads the stream.
	rxMu   sync.Mutex
	rx     *rxStream // set at Connect
	rxHdr  [hdrLen]byte
	rxDone bool                   // the stream is finished; under rxMu
	cur    inFrame                // a payload received in pieces (payload.go); under rxMu
	curReg atomic.Pointer[region] // cur's target region, for Dereg (failHolders)

	// fdMu guards the socket's descriptor against being closed during a
	// raw read; fdClosed is set (under fdMu) before the connection closes.
	fdMu     sync.RWMutex
	fdClosed bool

	// wrMu serializes whole writes to the connection: requests (posters),
	// queued responses (writer goroutine), immediate responses (TryLock).
	wrMu       sync.Mutex
	respMu     sync.Mutex          // guards respQueued
	respQueued int                 // responses handed to the writer goroutine, not yet written
	resps      [respBatch]response // collected by the receive engine (rxMu)
	nresp      int
	respHdrs   [respBatch][hdrLen]byte
	// Every write's gather list, under wrMu (write.go): requests (a batch
	// of postBatch frames), immediate and queued responses.
	iov     [postBatch * (1 + maxSGE)]syscall.Iovec
	iovN    int
	wrN     int
	writeFn func(uintptr) bool // writevOnce, bound once
	wnb     net.Buffers        // the rest of a write that would block (write.go)
}

type acceptedConn struct {
	conn      net.Conn
	dialerQPN uint32
	peerDepth int
}

func (p *pd) CreateQP(attr verbs.QPAttr) (verbs.QP, error) {
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: completion queues must come from the soft provider", verbs.ErrInvalid)
	}
	if attr.MaxSendWR <= 0 || attr.MaxRecvWR < 0 || attr.MaxSendWR > deviceAttr().MaxQPWR || attr.MaxRecvWR > deviceAttr().MaxQPWR {
		return nil, fmt.Errorf("%w: queue depths %d/%d", verbs.ErrInvalid, attr.MaxSendWR, attr.MaxRecvWR)
	}
	if attr.MaxSGE > maxSGE {
		return nil, fmt.Errorf("%w: %d SGEs, soft supports %d", verbs.ErrInvalid, attr.MaxSGE, maxSGE)
	}
	c := p.ctx
	q := &qp{
		ctx: c, pd: p, sendCQ: scq, recvCQ: rcq,
		maxSend: attr.MaxSendWR, maxRecv: attr.MaxRecvWR,
		connCh: make(chan acceptedConn, 1),
		pend:   make([]pending, attr.MaxSendWR),
		recvs:  make([]recvEntry, max(attr.MaxRecvWR, 1)),
		done:   make(chan struct{}),
	}
	q.cond.L = &q.mu
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, verbs.ErrClosed
	}
	q.num = c.nextQPN.Add(1) & 0xffffff
	for q.num == 0 || c.qps[q.num] != nil { // 0 names no queue pair (connmgr.go)
		q.num = c.nextQPN.Add(1) & 0xffffff
	}
	c.qps[q.num] = q
	return q, nil
}

func (q *qp) Num() uint32 { return q.num }

func (q *qp) Endpoint() verbs.Endpoint {
	return verbs.Endpoint{QPN: q.num, Addr: q.ctx.ln.Addr().String(), Device: "soft0", MTU: deviceAttr().MTU}
}

// dials reports whether this side opens the TCP connection: the side with
// the smaller (address, QPN) does.
func (q *qp) dials(remote verbs.Endpoint) bool {
	me := q.Endpoint()
	if me.Addr != remote.Addr {
		return me.Addr < remote.Addr
	}
	return me.QPN < remote.QPN
}

func (q *qp) Connect(remote verbs.Endpoint) error {
	q.mu.Lock()
	if q.state != stInit || q.conn != nil {
		q.mu.Unlock()
		return fmt.Errorf("%w: connect on a queue pair that is not new", verbs.ErrQPState)
	}
	q.remote = remote
	q.mu.Unlock()
	var (
		conn      net.Conn
		peerDepth int
		err       error
	)
	if q.dials(remote) {
		conn, peerDepth, err = q.dial(remote)
	} else {
		conn, peerDepth, err = q.await(remote)
	}
	if err != nil {
		return err
	}
	return q.attach(conn, peerDepth, remote)
}

// attach makes q ready to send over conn, an authenticated connection to
// the queue pair remote names, whose send queue is peerDepth deep: it
// starts the connection's reader and writer goroutines.
func (q *qp) attach(conn net.Conn, peerDepth int, remote verbs.Endpoint) error {
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	q.mu.Lock()
	if q.state != stInit {
		q.mu.Unlock()
		conn.Close()
		return fmt.Errorf("%w: closed while connecting", verbs.ErrQPState)
	}
	q.remote = remote
	rx, err := newRxStream(q, conn)
	if err != nil {
		q.mu.Unlock()
		conn.Close()
		return fmt.Errorf("soft: %w", err)
	}
	q.conn = conn
	q.rx = rx
	q.writeFn = q.writevOnce
	q.respCh = make(chan response, peerDepth+q.maxRecv+16)
	q.state = stRTS
	q.mu.Unlock()
	q.sendMu.Lock()
	q.loop = q.loopPeer(remote)
	q.sendMu.Unlock()
	q.finished.Add(2)
	go q.serve()
	go q.writeResponses()
	q.ctx.prog.attach(q)
	return nil
}

func (q *qp) dial(remote verbs.Endpoint) (net.Conn, int, error) {
	conn, err := dialTCP(remote.Addr, ConnectTimeout)
	if err != nil {
		return nil, 0, fmt.Errorf("soft: connect to %s: %w", remote.Addr, err)
	}
	var payload [auth.PayloadLen]byte
	binary.LittleEndian.PutUint32(payload[0:], remote.QPN)
	binary.LittleEndian.PutUint32(payload[4:], q.num)
	binary.LittleEndian.PutUint32(payload[8:], uint32(q.maxSend))
	if err := auth.Dial(conn, q.ctx.secret, authRole, payload); err != nil {
		conn.Close()
		return nil, 0, fmt.Errorf("%w: %v", verbs.ErrAuth, err)
	}
	var depth [4]byte
	conn.SetReadDeadline(time.Now().Add(ConnectTimeout))
	if _, err := io.ReadFull(conn, depth[:]); err != nil {
		conn.Close()
		return nil, 0, fmt.Errorf("soft: peer %s refused queue pair %d: %w", remote.Addr, remote.QPN, err)
	}
	conn.SetReadDeadline(time.Time{})
	return conn, int(binary.LittleEndian.Uint32(depth[:])), nil
}

func (q *qp) await(remote verbs.Endpoint) (net.Conn, int, error) {
	timer := time.NewTimer(ConnectTimeout)
	defer timer.Stop()
	for {
		select {
		case ac := <-q.connCh:
			if ac.dialerQPN != remote.QPN {
				ac.conn.Close()
				continue
			}
			return ac.conn, ac.peerDepth, nil
		case <-q.done:
			return nil, 0, fmt.Errorf("%w: closed while connecting", verbs.ErrQPState)
		case <-timer.C:
			return nil, 0, fmt.Errorf("%w: no connection from %s (qp %d) within %v", verbs.ErrTimeout, remote.Addr, remote.QPN, ConnectTimeout)
		}
	}
}

// acceptLoop authenticates incoming connections and hands each to the
// queue pair it names. Anything that fails authentication is dropped
// before a single request is read.
func (c *context) acceptLoop() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			payload, err := auth.Accept(conn, c.secret, authRole)
			if err != nil {
				conn.Close()
				return
			}
			target := binary.LittleEndian.Uint32(payload[0:])
			ac := acceptedConn{conn: conn, dialerQPN: binary.LittleEndian.Uint32(payload[4:]), peerDepth: int(binary.LittleEndian.Uint32(payload[8:]))}
			if ac.peerDepth <= 0 || ac.peerDepth > deviceAttr().MaxQPWR {
				conn.Close()
				return
			}
			if target == 0 {
				c.onDemand(ac, &payload)
				return
			}
			c.mu.Lock()
			q := c.qps[target]
			c.mu.Unlock()
			if q == nil {
				conn.Close()
				return
			}
			// Tell the dialer our depth now, so it need not wait for this
			// program to reach Connect.
			var depth [4]byte
			binary.LittleEndian.PutUint32(depth[:], uint32(q.maxSend))
			if _, err := conn.Write(depth[:]); err != nil {
				conn.Close()
				return
			}
			select {
			case q.connCh <- ac:
			default:
				conn.Close()
			}
		}()
	}
}

// resolve maps a local SGE to bytes of a registered region of this PD.
func (q *qp) resolve(s verbs.SGE, need verbs.Access) (*region, []byte, error) {
	r := q.ctx.regions.lookup(s.LKey)
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
// with one doorbell.
func (q *qp) PostSend(first *verbs.SendWR) (*verbs.SendWR, error) {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	for wr := first; wr != nil; wr = wr.Next {
		if err := q.postOne(wr); err != nil {
			q.sendBatch()
			return wr, err
		}
	}
	q.sendBatch()
	return nil, nil
}

// sendBatch writes the frames encoded so far; sendMu held.
func (q *qp) sendBatch() {
	if q.nframes == 0 {
		return
	}
	q.wrMu.Lock()
	err := q.writeLocked(q.bufs[:q.nbufs])
	q.wrMu.Unlock()
	clear(q.bufs[:q.nbufs])
	q.nframes, q.nbufs = 0, 0
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
			f.flags = flagAck
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
		}
	default:
		return fmt.Errorf("%w: opcode %v", verbs.ErrInvalid, wr.Op)
	}
	if total > maxPayload {
		return fmt.Errorf("%w: %d bytes in one request (max %d)", verbs.ErrInvalid, total, maxPayload)
	}
	f.len = uint32(total)
	p.length = f.len
	if q.loop != nil {
		return q.postLoop(&f, &p, &payload, len(wr.SGL))
	}

	if wr.Flags&verbs.Fence != 0 {
		q.sendBatch() // the reads it waits for may still be in the batch
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

	// Queue the frame for the batch's gather write.
	h := &q.hdrs[q.nframes]
	f.encode(h)
	release()
	q.bufs[q.nbufs] = h[:]
	q.nbufs++
	if f.kind == kReqWrite || f.kind == kReqWriteImm || f.kind == kReqSend {
		for i := range wr.SGL {
			q.bufs[q.nbufs] = payload[i]
			q.nbufs++
		}
	}
	q.nframes++
	if q.nframes == postBatch {
		q.sendBatch()
	}
	return nil
}

// sendable reports whether the queue pair can take requests.
func (q *qp) sendable() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != stRTS {
		return q.stateErr()
	}
	return nil
}

// stateErr is the error of a post to a queue pair that is not ready: it
// wraps verbs.ErrQPState and, after a failure, its cause; q.mu held.
func (q *qp) stateErr() error {
	if q.failErr == nil {
		return fmt.Errorf("%w: not connected", verbs.ErrQPState)
	}
	return fmt.Errorf("%w: %w", verbs.ErrQPState, q.failErr)
}

// SetError moves the queue pair to the error state (verbs.ErrorSetter):
// its connection closes, so the peer sees it fail too.
func (q *qp) SetError(cause error) { q.fail(verbs.StatusTransport, cause) }

// Err says why the queue pair entered the error state, or nil
// (verbs.ErrorReporter).
func (q *qp) Err() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != stError {
		return nil
	}
	return q.failErr
}

func (q *qp) PostRecv(first *verbs.RecvWR) (*verbs.RecvWR, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for wr := first; wr != nil; wr = wr.Next {
		if q.state == stError {
			return wr, q.stateErr()
		}
		if len(wr.SGL) > maxSGE {
			return wr, fmt.Errorf("%w: %d SGEs", verbs.ErrInvalid, len(wr.SGL))
		}
		if q.rn == len(q.recvs) || q.maxRecv == 0 {
			return wr, fmt.Errorf("%w: %d receives posted", verbs.ErrQueueFull, q.rn)
		}
		e := recvEntry{id: wr.ID, nseg: len(wr.SGL)}
		for i, s := range wr.SGL {
			_, b, err := q.resolve(s, verbs.AccessLocalWrite)
			if err != nil {
				return wr, err
			}
			e.seg[i] = b
		}
		q.recvs[(q.rhead+q.rn)%len(q.recvs)] = e
		q.rn++
	}
	return nil, nil
}

// Close destroys the queue pair. A connected queue pair first says goodbye:
// it tells the peer the last of its requests that was executed, so the
// peer completes those and fails only later ones, and does not take the
// orderly close for a failure. Outstanding requests complete as flushed.
func (q *qp) Close() error {
	q.mu.Lock()
	conn := q.conn
	rts := q.state == stRTS
	q.mu.Unlock()
	if rts {
		q.sendMu.Lock()
		f := frame{kind: kGoodbye, seq: q.lastExec.Load()}
		f.encode(&q.hdr)
		q.wrMu.Lock()
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		conn.Write(q.hdr[:])
		q.wrMu.Unlock()
		q.sendMu.Unlock()
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.CloseWrite()
		}
		// The peer answers with its own end of stream; wait for it
		// briefly so that closing does not reset data still in flight.
		select {
		case <-q.done:
		case <-time.After(time.Second):
		}
	}
	q.fail(verbs.StatusFlushed, verbs.ErrClosed)
	q.finished.Wait()
	q.ctx.prog.detach(q)
	q.ctx.mu.Lock()
	delete(q.ctx.qps, q.num)
	q.ctx.mu.Unlock()
	return nil
}

// fail moves the queue pair to the error state once and closes the
// connection. Outstanding requests are then flushed: the oldest completes
// with status, the others and all posted receives as flushed. If the reader
// goroutine runs, it flushes when it exits, so it never has memory released
// under a payload it is still receiving.
func (q *qp) fail(status verbs.Status, cause error) {
	q.mu.Lock()
	if q.state == stError {
		q.mu.Unlock()
		return
	}
	running := q.state == stRTS
	q.state = stError
	q.failStatus = status
	q.failErr = cause
	if q.conn != nil {
		q.fdMu.Lock()
		q.fdClosed = true
		q.fdMu.Unlock()
		q.conn.Close()
	}
	if !running {
		q.flushLocked()
	}
	q.cond.Broadcast()
	q.mu.Unlock()
	close(q.done)
}

// flushLocked completes everything outstanding after a failure; q.mu held.
func (q *qp) flushLocked() {
	for i := 0; q.pn > 0; i++ {
		st := verbs.StatusFlushed
		if i == 0 {
			st = q.failStatus
		}
		q.completeHead(st)
	}
	for q.rn > 0 {
		e := q.recvs[q.rhead]
		q.recvs[q.rhead] = recvEntry{}
		q.rhead = (q.rhead + 1) % len(q.recvs)
		q.rn--
		q.recvCQ.push(verbs.WC{ID: e.id, Status: verbs.StatusFlushed, Op: verbs.OpRecv, QPN: q.num})
	}
}

// completeHead completes the oldest pending request with status. It is
// called with q.mu held.
func (q *qp) completeHead(status verbs.Status) {
	p := &q.pend[q.phead]
	for i := 0; i < p.nseg; i++ {
		p.reg[i].inUse.RUnlock()
	}
	if p.signaled || status != verbs.StatusSuccess {
		q.sendCQ.push(verbs.WC{ID: p.id, Status: status, Op: p.op, ByteLen: p.length, QPN: q.num})
	}
	if p.nseg > 0 {
		q.ordered--
	}
	*p = pending{}
	q.phead = (q.phead + 1) % len(q.pend)
	q.pn--
}
