//go:build ibv && linux && cgo

package ibv

/*
#include <stdlib.h> // C.calloc, C.free
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// Queue pairs: creating one, its endpoint, connecting it to a remote one
// (INIT, RTR, RTS), closing it.

// qp is an RC queue pair with C-side buffers for building requests.
type qp struct {
	c         *devContext
	qp        *C.struct_ibv_qp
	scq, rcq  *cq // attached until Close
	num       uint32
	psn       uint32
	maxSGE    int
	maxInline int
	maxSend   int
	maxRecv   int

	sendMu sync.Mutex // guards the send buffers and state
	state  int
	sd     []C.rg_swr
	ssg    []C.struct_ibv_sge
	swr    *C.struct_ibv_send_wr
	sq     *C.rg_sendq // qp, sd, ssg and swr for rg_post_send, C memory

	recvMu sync.Mutex // guards the receive buffers
	rd     []C.rg_rwr
	rsg    []C.struct_ibv_sge
	rwr    *C.struct_ibv_recv_wr
	rq     *C.rg_recvq // qp, rd, rsg and rwr for rg_post_recv, C memory
}

// cAddr passes C memory to C as an integer, which cgo does not check for
// Go pointers (see rg_sendq in shim.h). Never pass Go memory this way.
func cAddr(p unsafe.Pointer) C.uintptr_t { return C.uintptr_t(uintptr(p)) }

// cAlloc allocates n zeroed elements of size sz in C memory.
func cAlloc(n int, sz uintptr) unsafe.Pointer {
	p := C.calloc(C.size_t(n), C.size_t(sz))
	if p == nil {
		panic("ibv: out of C memory")
	}
	return p
}

// CreateQP creates an RC queue pair in the INIT state, with remote read,
// write and atomic access allowed (regions still decide).
func (p *pd) CreateQP(attr verbs.QPAttr) (verbs.QP, error) {
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 || scq == nil || rcq == nil {
		return nil, fmt.Errorf("%w: completion queues must come from the ibv provider", verbs.ErrInvalid)
	}
	c := p.c
	if scq.c != c || rcq.c != c {
		return nil, fmt.Errorf("%w: completion queues of another device", verbs.ErrInvalid)
	}
	if attr.MaxSendWR < 1 || attr.MaxSendWR > c.attr.MaxQPWR || attr.MaxRecvWR < 0 || attr.MaxRecvWR > c.attr.MaxQPWR {
		return nil, fmt.Errorf("%w: queue depths %d/%d (device max %d)", verbs.ErrInvalid, attr.MaxSendWR, attr.MaxRecvWR, c.attr.MaxQPWR)
	}
	nsge := max(attr.MaxSGE, 1)
	if nsge > c.attr.MaxSGE {
		return nil, fmt.Errorf("%w: %d SGEs (device max %d)", verbs.ErrInvalid, nsge, c.attr.MaxSGE)
	}
	if attr.MaxInline < 0 {
		return nil, fmt.Errorf("%w: inline size %d", verbs.ErrInvalid, attr.MaxInline)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pd == nil {
		return nil, verbs.ErrClosed
	}
	if err := scq.attach(); err != nil {
		return nil, err
	}
	if err := rcq.attach(); err != nil {
		scq.detach()
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			scq.detach()
			rcq.detach()
		}
	}()
	var cp C.struct_ibv_qp_cap
	var h *C.struct_ibv_qp
	var err error
	// The device may grant less inline data than asked for; step down.
	for inl := min(attr.MaxInline, max(c.attr.MaxInline, 0)); ; inl /= 2 {
		h, err = C.rg_create_qp(p.pd, scq.cq, rcq.cq, C.int(attr.MaxSendWR), C.int(max(attr.MaxRecvWR, 1)), C.int(nsge), C.int(inl), &cp)
		if h != nil || inl == 0 {
			break
		}
	}
	if h == nil {
		return nil, errnoErr("ibv_create_qp", err)
	}
	acc := C.int(C.IBV_ACCESS_LOCAL_WRITE | C.IBV_ACCESS_REMOTE_WRITE | C.IBV_ACCESS_REMOTE_READ)
	if c.attr.AtomicCap != verbs.AtomicNone {
		acc |= C.IBV_ACCESS_REMOTE_ATOMIC
	}
	if rc := C.rg_qp_init(h, C.int(c.port), acc); rc != 0 {
		C.ibv_destroy_qp(h)
		return nil, rcErr("modify QP to INIT", rc)
	}
	ok = true
	q := &qp{
		c:         c,
		qp:        h,
		scq:       scq,
		rcq:       rcq,
		num:       uint32(h.qp_num),
		psn:       rand.Uint32() & 0xffffff,
		maxSGE:    min(int(cp.max_send_sge), int(cp.max_recv_sge)),
		maxInline: int(cp.max_inline_data),
		maxSend:   int(cp.max_send_wr),
		maxRecv:   int(cp.max_recv_wr),
	}
	q.maxSGE = max(q.maxSGE, 1)
	sb := min(q.maxSend, postBatch)
	q.sd = unsafe.Slice((*C.rg_swr)(cAlloc(sb, unsafe.Sizeof(C.rg_swr{}))), sb)
	q.ssg = unsafe.Slice((*C.struct_ibv_sge)(cAlloc(sb*q.maxSGE, unsafe.Sizeof(C.struct_ibv_sge{}))), sb*q.maxSGE)
	q.swr = (*C.struct_ibv_send_wr)(cAlloc(sb, unsafe.Sizeof(C.struct_ibv_send_wr{})))
	rb := max(min(q.maxRecv, postBatch), 1)
	q.rd = unsafe.Slice((*C.rg_rwr)(cAlloc(rb, unsafe.Sizeof(C.rg_rwr{}))), rb)
	q.rsg = unsafe.Slice((*C.struct_ibv_sge)(cAlloc(rb*q.maxSGE, unsafe.Sizeof(C.struct_ibv_sge{}))), rb*q.maxSGE)
	q.rwr = (*C.struct_ibv_recv_wr)(cAlloc(rb, unsafe.Sizeof(C.struct_ibv_recv_wr{})))
	q.sq = (*C.rg_sendq)(cAlloc(1, unsafe.Sizeof(C.rg_sendq{})))
	*q.sq = C.rg_sendq{qp: h, d: &q.sd[0], sges: &q.ssg[0], wrs: q.swr}
	q.rq = (*C.rg_recvq)(cAlloc(1, unsafe.Sizeof(C.rg_recvq{})))
	*q.rq = C.rg_recvq{qp: h, d: &q.rd[0], sges: &q.rsg[0], wrs: q.rwr}
	return q, nil
}

// Num is the queue pair number.
func (q *qp) Num() uint32 { return q.num }

// Endpoint is this side's connection information.
func (q *qp) Endpoint() verbs.Endpoint {
	c := q.c
	ep := verbs.Endpoint{
		QPN:      q.num,
		PSN:      q.psn,
		LID:      c.lid,
		GIDIndex: c.gidIndex,
		MTU:      c.attr.MTU,
		Device:   c.attr.Name,
	}
	if c.global {
		ep.GID = append([]byte(nil), c.gid[:]...)
	}
	return ep
}

// Connect moves the queue pair INIT → RTR → RTS against remote.
func (q *qp) Connect(remote verbs.Endpoint) error {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	switch q.state {
	case qpClosed:
		return verbs.ErrClosed
	case qpRTS:
		return fmt.Errorf("%w: queue pair %d is already connected", verbs.ErrQPState, q.num)
	}
	c := q.c
	mtu := c.mtuEnum
	if remote.MTU > 0 {
		if e := mtuEnum(remote.MTU); e == 0 {
			return fmt.Errorf("%w: remote MTU %d", verbs.ErrInvalid, remote.MTU)
		} else if e < mtu {
			mtu = e
		}
	}
	var dgid [16]byte
	global := len(remote.GID) == 16 && [16]byte(remote.GID) != [16]byte{}
	if global {
		dgid = [16]byte(remote.GID)
	} else if c.ethernet {
		return fmt.Errorf("%w: RoCE needs the peer's GID (endpoint %+v)", verbs.ErrInvalid, remote)
	}
	if remote.QPN == 0 || remote.QPN > 0xffffff {
		return fmt.Errorf("%w: remote QPN %d", verbs.ErrInvalid, remote.QPN)
	}
	rc := C.rg_qp_rtr(q.qp, C.int(c.port), C.int(mtu), C.uint32_t(remote.QPN), C.uint32_t(remote.PSN&0xffffff),
		C.int(min(c.maxQPRdAtom, maxRdAtomic)), minRnrTimer, C.uint16_t(remote.LID),
		boolInt(global), (*C.uint8_t)(unsafe.Pointer(&dgid[0])), C.int(c.gidIndex))
	if rc != 0 {
		return rcErr(fmt.Sprintf("modify QP %d to RTR (peer qpn %d)", q.num, remote.QPN), rc)
	}
	rc = C.rg_qp_rts(q.qp, C.uint32_t(q.psn), C.int(min(c.maxQPInitRdAtom, maxRdAtomic)), ackTimeout, retryCount, rnrRetry)
	if rc != 0 {
		return rcErr(fmt.Sprintf("modify QP %d to RTS", q.num), rc)
	}
	q.state = qpRTS
	return nil
}

func boolInt(b bool) C.int {
	if b {
		return 1
	}
	return 0
}

// MaxInline is the inline payload the queue pair was granted
// (verbs.InlineSizer).
func (q *qp) MaxInline() int { return q.maxInline }

// attach counts a queue pair created on the CQ: Close refuses while any remain.
func (q *cq) attach() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.cq == nil || q.closing.Load() {
		return verbs.ErrClosed
	}
	q.qps++
	return nil
}

// Close destroys the queue pair; outstanding requests are flushed (their
// completions may or may not be delivered, as on hardware).
func (q *qp) Close() error {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	if q.state == qpClosed {
		return verbs.ErrClosed
	}
	if rc := C.ibv_destroy_qp(q.qp); rc != 0 {
		return rcErr("ibv_destroy_qp", rc)
	}
	q.state = qpClosed
	q.scq.detach()
	q.rcq.detach()
	C.free(unsafe.Pointer(&q.sd[0]))
	C.free(unsafe.Pointer(&q.ssg[0]))
	C.free(unsafe.Pointer(q.swr))
	C.free(unsafe.Pointer(&q.rd[0]))
	C.free(unsafe.Pointer(&q.rsg[0]))
	C.free(unsafe.Pointer(q.rwr))
	C.free(unsafe.Pointer(q.sq))
	C.free(unsafe.Pointer(q.rq))
	q.sd, q.ssg, q.swr, q.rd, q.rsg, q.rwr, q.sq, q.rq = nil, nil, nil, nil, nil, nil, nil, nil
	q.qp = nil
	return nil
}
