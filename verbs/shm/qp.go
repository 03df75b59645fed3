package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rmago/rmago/internal/memfd"
	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/accop"
	"github.com/rmago/rmago/verbs/internal/recvq"
)

// Queue pair states.
const (
	stInit = iota
	stRTS
	stError
)

// How an origin reaches a peer region's bytes.
const (
	reachDirect = iota + 1 // a pointer in this process (its memfd mapped, or loopback)
	reachVM                // process_vm_readv/writev at the owner's addresses
	reachSock              // requests to the owner's responder
)

// rmap is an origin's way to a peer's region, made on first use of its key.
type rmap struct {
	key   uint32
	reach uint8
	addr  uint64 // the region's first address at the owner
	base  unsafe.Pointer
	mp    *memfd.Mapping
}

type qp struct {
	ctx     *device
	pd      *pd
	num     uint32
	sendCQ  *cq
	recvCQ  *cq
	maxSend int
	maxRecv int
	in      *inbox // this side's receive ring, mapped by the peer

	connMu  sync.Mutex // on-demand connecting (conn.go)
	dialing bool
	connCh  chan acceptedConn // eager Connect: the listener's hand-over
	ready   chan struct{}     // closed once connected

	// The peer, set when connecting. sendMu serializes posting.
	sendMu    sync.Mutex
	loop      *qp // the peer queue pair when it belongs to this context
	peerIn    *inbox
	peerBell  *bell
	peerTab   *table
	peerTabMp *memfd.Mapping
	peerPid   int
	peerQPN   uint32
	peerName  string
	sent      uint64         // slots written to the peer's inbox; under sendMu
	credit    uint64         // the peer's posted count as last read; under sendMu
	segs      [maxSGE][]byte // the request's local memory; under sendMu
	mapped    []rmap         // by region index; under sendMu
	conn      *net.UnixConn

	st    atomic.Int32 // the state, for the data path
	mu    sync.Mutex   // state, failErr and the receive ring
	state int
	err   error
	recvs recvq.Queue
	done  chan struct{}
	// failed closes when fail has finished its work: Close waits for it
	// before freeing the inbox, which a concurrent fail (a loopback
	// peer's, from another goroutine) may still be draining.
	failed chan struct{}

	// Requests to the peer's responder, made by posters (sendMu held): one
	// at a time. The reader goroutine hands each response over on respCh
	// and writes a read's payload into rdDst (under rdMu).
	wrMu   sync.Mutex // whole messages to the socket
	respCh chan response
	rdMu   sync.Mutex
	rdDst  [][]byte
	reqHdr [hdrLen]byte
	reqBuf net.Buffers
	reqOut net.Buffers // reqBuf as WriteTo consumes it (a local would escape: an allocation a request)
	// reqTimer bounds the wait for a response; reused (sendMu held).
	reqTimer *time.Timer
	serve    sync.WaitGroup
	acc      accState // the responder's accumulate buffers (accumulate.go)
}

func (p *pd) CreateQP(attr verbs.QPAttr) (verbs.QP, error) {
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: completion queues must come from the shm provider", verbs.ErrInvalid)
	}
	if err := verbs.CheckQPAttr(attr, deviceAttr()); err != nil {
		return nil, err
	}
	in, err := newInbox(max(attr.MaxRecvWR, 1))
	if err != nil {
		return nil, err
	}
	c := p.ctx
	q := &qp{
		ctx: c, pd: p, sendCQ: scq, recvCQ: rcq, maxSend: attr.MaxSendWR, maxRecv: attr.MaxRecvWR,
		in: in, connCh: make(chan acceptedConn, 1), ready: make(chan struct{}),
		recvs: recvq.New(attr.MaxRecvWR), done: make(chan struct{}), failed: make(chan struct{}),
		respCh: make(chan response, 1),
	}
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		in.free()
		return nil, verbs.ErrClosed
	}
	q.num = c.nextQPN.Add(1) & 0xffffff
	for q.num == 0 || c.qps[q.num] != nil { // 0 names no queue pair (conn.go)
		q.num = c.nextQPN.Add(1) & 0xffffff
	}
	c.qps[q.num] = q
	c.mu.Unlock()
	rcq.attach(q)
	return q, nil
}

func (q *qp) Num() uint32 { return q.num }

func (q *qp) Endpoint() verbs.Endpoint {
	return verbs.Endpoint{QPN: q.num, Addr: q.ctx.name, Device: "shm0", MTU: deviceAttr().MTU}
}

// peer names the peer in errors.
func (q *qp) peer() string {
	return fmt.Sprintf("peer pid %d (%s, qp %d, local qp %d)", q.peerPid, q.peerName, q.peerQPN, q.num)
}

// Connect connects q to the queue pair remote names: of this context
// (loopback: linked directly), or of another, over a unix socket that the
// side with the smaller (address, QPN) dials.
func (q *qp) Connect(remote verbs.Endpoint) error {
	if remote.Addr == q.ctx.name {
		q.ctx.mu.Lock()
		other := q.ctx.qps[remote.QPN]
		q.ctx.mu.Unlock()
		if other == nil {
			return fmt.Errorf("%w: no queue pair %d in this context", verbs.ErrInvalid, remote.QPN)
		}
		return q.link(other)
	}
	me := q.Endpoint()
	if me.Addr < remote.Addr || (me.Addr == remote.Addr && me.QPN < remote.QPN) {
		conn, setup, err := q.dialSocket(remote.Addr, remote.QPN, 0)
		if err != nil {
			return err
		}
		return q.finishDial(conn, setup, remote.Addr)
	}
	timer := time.NewTimer(connectTimeout(q.ctx))
	defer timer.Stop()
	for {
		select {
		case ac := <-q.connCh:
			if ac.dialerQPN != remote.QPN {
				ac.conn.Close()
				continue
			}
			return q.acceptSocket(ac)
		case <-q.done:
			return fmt.Errorf("%w: closed while connecting", verbs.ErrQPState)
		case <-timer.C:
			return fmt.Errorf("%w: no connection from %s (qp %d) within %v", verbs.ErrTimeout, remote.Addr, remote.QPN, connectTimeout(q.ctx))
		}
	}
}

// link connects q to other, a queue pair of the same context: requests
// then reach this process's memory directly.
func (q *qp) link(other *qp) error {
	q.sendMu.Lock()
	q.mu.Lock()
	if q.state != stInit {
		q.mu.Unlock()
		q.sendMu.Unlock()
		return fmt.Errorf("%w: connect on a queue pair that is not new", verbs.ErrQPState)
	}
	q.loop, q.peerIn, q.peerBell, q.peerTab = other, other.in, other.recvCQ.bell, q.ctx.table
	q.peerPid, q.peerQPN, q.peerName = q.ctx.pid, other.num, q.ctx.name
	q.state = stRTS
	q.st.Store(stRTS)
	q.mu.Unlock()
	q.sendMu.Unlock()
	close(q.ready)
	return nil
}

// sendable reports whether the queue pair takes requests.
func (q *qp) sendable() error {
	if q.st.Load() == stRTS {
		return nil
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.stateErr()
}

// stateErr wraps verbs.ErrQPState and the failure's cause; q.mu held.
func (q *qp) stateErr() error {
	if q.err == nil {
		return fmt.Errorf("%w: not connected", verbs.ErrQPState)
	}
	return fmt.Errorf("%w: %w", verbs.ErrQPState, q.err)
}

// PostSend runs a chain of requests, in order, at once: each completes
// before PostSend returns (signalled ones on the send CQ).
func (q *qp) PostSend(first *verbs.SendWR) (*verbs.SendWR, error) {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	for wr := first; wr != nil; wr = wr.Next {
		if err := q.postOne(wr); err != nil {
			return wr, err
		}
	}
	return nil, nil
}

// PostSendCompleted posts one request and returns its status instead of
// queueing its completion (verbs.PostCompleter).
func (q *qp) PostSendCompleted(wr *verbs.SendWR) (verbs.Status, error) {
	if wr.Next != nil {
		return 0, fmt.Errorf("%w: PostSendCompleted takes one request, not a chain", verbs.ErrInvalid)
	}
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	st, _, err := q.run(wr)
	if err == nil {
		q.refused(wr, st)
	}
	return st, err
}

// postOne runs one request of PostSend and queues its completion if it
// is signalled or failed; sendMu held.
func (q *qp) postOne(wr *verbs.SendWR) error {
	st, total, err := q.run(wr)
	if err != nil {
		return err
	}
	if st != verbs.StatusSuccess || wr.Flags&verbs.Signaled != 0 {
		q.sendCQ.push(verbs.WC{ID: wr.ID, Status: st, Op: wr.Op, ByteLen: uint32(total), QPN: q.num})
	}
	q.refused(wr, st)
	return nil
}

// refused puts the queue pair in the error state after a request the
// target refused (status st), as after a NAK; its completion, with st,
// comes first. sendMu held.
func (q *qp) refused(wr *verbs.SendWR, st verbs.Status) {
	if st != verbs.StatusSuccess && st != verbs.StatusTransport {
		q.fail(verbs.StatusFlushed, fmt.Errorf("%w: request %d (%v) to %s refused: %s", st.Err(), wr.ID, wr.Op, q.peer(), why(st)), true)
	}
}

// run checks and executes one request, returning its status and length.
// An error means the request was not posted. sendMu held.
func (q *qp) run(wr *verbs.SendWR) (verbs.Status, uint64, error) {
	if len(wr.SGL) > maxSGE {
		return 0, 0, fmt.Errorf("%w: %d SGEs", verbs.ErrInvalid, len(wr.SGL))
	}
	segs := &q.segs
	var total uint64
	need := verbs.Access(0)
	switch wr.Op {
	case verbs.OpWrite, verbs.OpWriteImm, verbs.OpSend:
	case verbs.OpRead:
		need = verbs.AccessLocalWrite
	case verbs.OpFetchAdd, verbs.OpCompareSwap:
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 || wr.RemoteAddr%8 != 0 {
			return 0, 0, fmt.Errorf("%w: atomics take one 8-byte SGE and an 8-byte aligned remote address", verbs.ErrInvalid)
		}
		need = verbs.AccessLocalWrite
	case verbs.OpAccumulate:
		if err := verbs.CheckAccumulate(wr, maxFetchAcc); err != nil {
			return 0, 0, err
		}
		if wr.Acc.Fetch {
			need = verbs.AccessLocalWrite
		}
	default:
		return 0, 0, fmt.Errorf("%w: opcode %v", verbs.ErrInvalid, wr.Op)
	}
	for i, s := range wr.SGL {
		b, err := q.ctx.resolve(q.pd, s, need)
		if err != nil {
			return 0, 0, err
		}
		segs[i] = b
		total += uint64(s.Length)
	}
	if wr.Op == verbs.OpSend && total > maxSendBytes {
		return 0, 0, fmt.Errorf("%w: a send of %d bytes (shm sends carry at most %d)", verbs.ErrInvalid, total, maxSendBytes)
	}
	if total > 1<<32-1 {
		return 0, 0, fmt.Errorf("%w: %d bytes in one request", verbs.ErrInvalid, total)
	}
	if err := q.sendable(); err != nil {
		return 0, 0, err
	}
	release()
	st := q.execute(wr, segs[:len(wr.SGL)], total)
	release()
	clear(segs[:len(wr.SGL)])
	return st, total, nil
}

func why(st verbs.Status) string {
	switch st {
	case verbs.StatusRemoteAccess:
		return "no region is registered there with that key, access and range (was the window freed, or is the target shutting down?)"
	case verbs.StatusRNR:
		return "no receive was posted"
	case verbs.StatusRemoteOp:
		return "the target could not execute it"
	}
	return st.String()
}

// execute runs one request; sendMu held.
func (q *qp) execute(wr *verbs.SendWR, segs [][]byte, total uint64) verbs.Status {
	switch wr.Op {
	case verbs.OpWrite, verbs.OpWriteImm:
		if total > 0 { // zero-length writes touch no memory and check no key, as on hardware
			if st, _ := q.access(mWrite, wr.RKey, wr.RemoteAddr, total, segs, 0, 0); st != verbs.StatusSuccess {
				return st
			}
		}
		if wr.Op == verbs.OpWriteImm {
			return q.deliver(verbs.OpRecvImm, wr.Imm, total, nil)
		}
		return verbs.StatusSuccess
	case verbs.OpSend:
		return q.deliver(verbs.OpRecv, 0, total, segs)
	case verbs.OpRead:
		if total == 0 {
			return verbs.StatusSuccess
		}
		st, _ := q.access(mRead, wr.RKey, wr.RemoteAddr, total, segs, 0, 0)
		return st
	case verbs.OpFetchAdd:
		st, old := q.access(mFAA, wr.RKey, wr.RemoteAddr, 8, segs, wr.CompareAdd, 0)
		if st == verbs.StatusSuccess {
			binary.LittleEndian.PutUint64(segs[0], old)
		}
		return st
	case verbs.OpCompareSwap:
		st, old := q.access(mCAS, wr.RKey, wr.RemoteAddr, 8, segs, wr.CompareAdd, wr.Swap)
		if st == verbs.StatusSuccess {
			binary.LittleEndian.PutUint64(segs[0], old)
		}
		return st
	case verbs.OpAccumulate:
		return q.accumulate(wr, segs, total)
	}
	return verbs.StatusRemoteOp
}

// access runs a write, read or atomic (kind) on the peer's region key at
// addr, after the checks a NIC makes.
func (q *qp) access(kind uint8, key uint32, addr, n uint64, segs [][]byte, arg0, arg1 uint64) (verbs.Status, uint64) {
	need := verbs.AccessRemoteWrite
	switch kind {
	case mRead:
		need = verbs.AccessRemoteRead
	case mFAA, mCAS:
		need = verbs.AccessRemoteAtomic
	}
	e, ok := q.peerTab.check(key, addr, n, need)
	if !ok {
		q.forgetGone(key)
		return verbs.StatusRemoteAccess, 0
	}
	m, st := q.reach(key, e)
	if st != verbs.StatusSuccess {
		e.done()
		return st, 0
	}
	switch m.reach {
	case reachDirect:
		p := unsafe.Add(m.base, addr-m.addr)
		var old uint64
		switch kind {
		case mWrite:
			dst := unsafe.Slice((*byte)(p), n)
			for _, s := range segs {
				dst = dst[copy(dst, s):]
			}
		case mRead:
			src := unsafe.Slice((*byte)(p), n)
			for _, d := range segs {
				src = src[copy(d, src):]
			}
		case mFAA:
			old = accop.FetchAdd((*uint64)(p), arg0)
		case mCAS:
			old = accop.CompareSwap((*uint64)(p), arg0, arg1)
		}
		e.done()
		return verbs.StatusSuccess, old
	case reachVM:
		if kind == mWrite || kind == mRead {
			err := vmCopy(q.peerPid, kind == mWrite, segs, addr)
			e.done()
			switch {
			case err == nil:
				return verbs.StatusSuccess, 0
			case errors.Is(err, syscall.EFAULT):
				return verbs.StatusRemoteAccess, 0
			case errors.Is(err, syscall.ESRCH):
				q.fail(verbs.StatusTransport, fmt.Errorf("%w: %s is gone (process_vm: %v)", verbs.ErrTransport, q.peer(), err), false)
				return verbs.StatusTransport, 0
			}
			// The kernel forbids cross-memory attach here (ptrace scope,
			// seccomp, a container): this region goes through the owner.
			m.reach = reachSock
			q.ctx.logOnce(fmt.Sprintf("shm: cross-memory attach to pid %d refused (%v); memory not in shared memory goes through the owner's socket", q.peerPid, err))
			return q.sockAccess(kind, key, addr, n, segs, arg0, arg1)
		}
	}
	e.done()
	return q.sockAccess(kind, key, addr, n, segs, arg0, arg1)
}

// forgetGone lets go of the mapping of key's region, refused by the table,
// now if the region is gone; sendMu held.
func (q *qp) forgetGone(key uint32) {
	if idx := int(key & (maxRegions - 1)); idx < len(q.mapped) && q.mapped[idx].key == key && q.peerTab[idx].tag.Load()&flagLive == 0 {
		q.mapped[idx].mp.Unmap()
		q.mapped[idx] = rmap{}
	}
}

// reach returns the way to the region of key (whose table entry e the
// caller holds), making it on first use; sendMu held.
func (q *qp) reach(key uint32, e *entry) (*rmap, verbs.Status) {
	idx := int(key & (maxRegions - 1))
	if idx < len(q.mapped) {
		if m := &q.mapped[idx]; m.key == key && m.addr == e.addr.Load() {
			return m, verbs.StatusSuccess
		}
	} else {
		q.mapped = append(q.mapped, make([]rmap, idx+1-len(q.mapped))...)
	}
	m := &q.mapped[idx]
	m.mp.Unmap() // a stale key's mapping
	*m = rmap{key: key, addr: e.addr.Load()}
	if q.loop != nil {
		r := q.ctx.lookup(key)
		if r == nil {
			*m = rmap{}
			return nil, verbs.StatusRemoteAccess
		}
		m.reach, m.base = reachDirect, r.base
		return m, verbs.StatusSuccess
	}
	tag := e.tag.Load()
	if tag&flagMemfd == 0 {
		m.reach = q.ctx.notShared
		return m, verbs.StatusSuccess
	}
	if mp := q.mapFromProc(int(tag>>16&0xffff), e); mp != nil {
		m.reach, m.mp, m.base = reachDirect, mp, mp.Base()
		return m, verbs.StatusSuccess
	}
	// Ask the owner for the region's memfd and map it.
	h := msg{kind: mGetFD, rkey: key}
	resp, st := q.request(&h, nil, nil)
	if st != verbs.StatusSuccess {
		*m = rmap{}
		return nil, st
	}
	if resp.fd < 0 {
		m.reach = q.ctx.notShared
		return m, verbs.StatusSuccess
	}
	mp, err := memfd.Map(resp.fd, int64(resp.h.arg0), int(resp.h.arg2))
	syscall.Close(resp.fd)
	if err != nil {
		q.ctx.logOnce(fmt.Sprintf("shm: mapping a region of pid %d: %v; going through its socket", q.peerPid, err))
		m.reach = reachSock
		return m, verbs.StatusSuccess
	}
	m.reach, m.mp, m.base, m.addr = reachDirect, mp, mp.Base(), resp.h.arg1
	return m, verbs.StatusSuccess
}

// deliver puts a write with immediate data or a send into the peer's
// inbox; sendMu held.
func (q *qp) deliver(op verbs.Opcode, imm uint32, n uint64, segs [][]byte) verbs.Status {
	in := q.peerIn
	if q.sent >= q.credit {
		if q.credit = in.posted.Load(); q.sent >= q.credit {
			return verbs.StatusRNR
		}
	}
	s := in.slot(q.sent)
	*(*uint32)(s) = uint32(op)
	*(*uint32)(unsafe.Add(s, 4)) = imm
	*(*uint32)(unsafe.Add(s, 8)) = uint32(n)
	if len(segs) > 0 {
		dst := unsafe.Slice((*byte)(unsafe.Add(s, slotHdr)), maxSendBytes)
		for _, b := range segs {
			dst = dst[copy(dst, b):]
		}
	}
	q.sent++
	in.seqOf(q.sent - 1).Store(uint32(q.sent)) // publishes the slot
	q.peerBell.alert()
	return verbs.StatusSuccess
}

// next turns the oldest arrived inbox slot into a receive completion, if
// there is one and a receive for it; q.mu held.
func (q *qp) next(wc *verbs.WC) bool {
	in := q.in
	head := in.head.Load()
	if q.recvs.Len() == 0 || !in.arrived() {
		return false
	}
	s := in.slot(head)
	op := verbs.Opcode(*(*uint32)(s))
	imm := *(*uint32)(unsafe.Add(s, 4))
	n := *(*uint32)(unsafe.Add(s, 8))
	e := q.recvs.Head()
	*wc = verbs.WC{ID: e.ID, Op: op, QPN: q.num, ByteLen: n}
	if op == verbs.OpRecvImm {
		wc.Imm, wc.HasImm = imm, true
	} else if n > 0 {
		src := unsafe.Slice((*byte)(unsafe.Add(s, slotHdr)), n)
		for i := 0; i < e.NSeg && len(src) > 0; i++ {
			src = src[copy(e.Seg[i], src):]
		}
		if len(src) > 0 {
			wc.Status = verbs.StatusLocalError
		}
	}
	q.recvs.Drop()
	in.head.Store(head + 1)
	return true
}

// drain moves arrived receives into wc; the CQ's lock held.
func (q *qp) drain(wc []verbs.WC) int {
	if !q.in.arrived() {
		return 0
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state == stError {
		return 0 // fail drained it
	}
	k := 0
	for k < len(wc) && q.next(&wc[k]) {
		k++
	}
	return k
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
			b, err := q.ctx.resolve(q.pd, s, verbs.AccessLocalWrite)
			if err != nil {
				return wr, err
			}
			e.Seg[i] = b
		}
		q.recvs.Push(&e)
		q.in.posted.Add(1)
	}
	return nil, nil
}

// SetError moves the queue pair to the error state (verbs.ErrorSetter).
func (q *qp) SetError(cause error) { q.fail(verbs.StatusTransport, cause, true) }

// Err says why the queue pair entered the error state (verbs.ErrorReporter).
func (q *qp) Err() error {
	if q.st.Load() == stRTS {
		return nil // the data path's check (transport.Fabric.DirectReady)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.state != stError {
		return nil
	}
	return q.err
}

// fail moves the queue pair to the error state once: receives that
// arrived before complete, the other posted receives are flushed, later
// posts fail, and the socket closes (after a goodbye that says the queue
// pair failed, when tell). A loopback peer fails too.
func (q *qp) fail(status verbs.Status, cause error, tell bool) {
	q.mu.Lock()
	if q.state == stError {
		q.mu.Unlock()
		return
	}
	q.state = stError
	q.st.Store(stError)
	q.err = cause
	conn, loop := q.conn, q.loop
	q.mu.Unlock()
	close(q.done)
	if conn != nil {
		if tell && q.wrMu.TryLock() {
			var h [hdrLen]byte
			(&msg{kind: mGoodbye, status: uint8(status) | 0x80}).encode(&h)
			conn.SetWriteDeadline(time.Now().Add(time.Second))
			conn.Write(h[:])
			q.wrMu.Unlock()
		}
		conn.Close()
	}
	rc := q.recvCQ
	rc.mu.Lock()
	q.mu.Lock()
	var wc verbs.WC
	for q.next(&wc) {
		rc.ring.Push(wc)
	}
	for q.recvs.Len() > 0 {
		e := q.recvs.Pop()
		if !rc.closed {
			rc.ring.Push(verbs.WC{ID: e.ID, Status: verbs.StatusFlushed, Op: verbs.OpRecv, QPN: q.num})
		}
	}
	q.mu.Unlock()
	closed := rc.closed
	rc.mu.Unlock()
	if !closed {
		rc.bell.ding()
	}
	select { // a poster waiting for its peer's response
	case q.respCh <- response{fd: -1, failed: true}:
	default:
	}
	if loop != nil {
		loop.fail(verbs.StatusTransport, fmt.Errorf("%w: loopback queue pair %d closed or failed: %v", verbs.ErrPeerClosed, q.num, cause), false)
	}
	close(q.failed)
}

// Close destroys the queue pair: a connected one says goodbye first, so
// the peer knows it left in order. Its mappings of the peer's memory go.
func (q *qp) Close() error {
	q.mu.Lock()
	conn := q.conn
	rts := q.state == stRTS
	q.mu.Unlock()
	if rts && conn != nil {
		q.wrMu.Lock()
		var h [hdrLen]byte
		(&msg{kind: mGoodbye}).encode(&h)
		conn.SetWriteDeadline(time.Now().Add(time.Second))
		conn.Write(h[:])
		q.wrMu.Unlock()
	}
	q.fail(verbs.StatusFlushed, verbs.ErrClosed, false)
	<-q.failed // another goroutine's fail of q may still be running
	q.serve.Wait()
	q.recvCQ.detach(q)
	q.sendMu.Lock()
	for i := range q.mapped {
		q.mapped[i].mp.Unmap()
	}
	q.mapped = nil
	if q.loop == nil {
		if q.peerIn != nil {
			q.peerIn.free()
		}
		if q.peerBell != nil {
			q.peerBell.free()
		}
		q.peerTabMp.Unmap()
	}
	q.peerIn, q.peerBell, q.peerTab, q.peerTabMp = nil, nil, nil, nil
	q.sendMu.Unlock()
	q.ctx.mu.Lock()
	delete(q.ctx.qps, q.num)
	q.ctx.mu.Unlock()
	// The CQ no longer drains the inbox (detached), and the peer has its
	// own mapping.
	q.in.free()
	return nil
}

var logged sync.Map

// logOnce logs a fallback's reason once per process.
func (c *device) logOnce(s string) {
	if _, dup := logged.LoadOrStore(s, true); !dup {
		log.Print(s)
	}
}
