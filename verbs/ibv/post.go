//go:build ibv && linux && cgo

package ibv

/*
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"syscall"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// Posting work requests: converting verbs.SendWR and RecvWR chains into
// libibverbs requests, a batch per cgo call.

// fillSend validates wr and writes it into descriptor d and SGE slots sg.
// The caller has checked len(wr.SGL) against the queue pair's maximum.
func (q *qp) fillSend(d *C.rg_swr, wr *verbs.SendWR, sg []C.struct_ibv_sge) error {
	var op uint32
	atomicOp := false
	switch wr.Op {
	case verbs.OpWrite:
		op = C.IBV_WR_RDMA_WRITE
	case verbs.OpWriteImm:
		op = C.IBV_WR_RDMA_WRITE_WITH_IMM
	case verbs.OpRead:
		op = C.IBV_WR_RDMA_READ
	case verbs.OpSend:
		op = C.IBV_WR_SEND
	case verbs.OpFetchAdd:
		op, atomicOp = C.IBV_WR_ATOMIC_FETCH_AND_ADD, true
	case verbs.OpCompareSwap:
		op, atomicOp = C.IBV_WR_ATOMIC_CMP_AND_SWP, true
	default:
		return fmt.Errorf("%w: opcode %v", verbs.ErrInvalid, wr.Op)
	}
	var flags uint32
	if wr.Flags&verbs.Signaled != 0 {
		flags |= C.IBV_SEND_SIGNALED
	}
	if wr.Flags&verbs.Fence != 0 {
		flags |= C.IBV_SEND_FENCE
	}
	if atomicOp {
		if len(wr.SGL) != 1 || wr.SGL[0].Length != 8 || wr.RemoteAddr%8 != 0 {
			return fmt.Errorf("%w: atomics take one 8-byte SGE and an 8-byte aligned remote address", verbs.ErrInvalid)
		}
		if q.c.attr.AtomicCap == verbs.AtomicNone {
			return fmt.Errorf("%w: %s has no atomic support", verbs.ErrInvalid, q.c.attr.Name)
		}
	}
	if wr.Flags&verbs.Inline != 0 {
		if atomicOp || wr.Op == verbs.OpRead {
			return fmt.Errorf("%w: inline %v", verbs.ErrInvalid, wr.Op)
		}
		var total uint64
		for _, s := range wr.SGL {
			total += uint64(s.Length)
		}
		if total > uint64(q.maxInline) {
			return fmt.Errorf("%w: %d inline bytes (queue pair max %d)", verbs.ErrInvalid, total, q.maxInline)
		}
		flags |= C.IBV_SEND_INLINE
	}
	for i, s := range wr.SGL {
		sg[i].addr = C.uint64_t(s.Addr)
		sg[i].length = C.uint32_t(s.Length)
		sg[i].lkey = C.uint32_t(s.LKey)
	}
	d.wr_id = C.uint64_t(wr.ID)
	d.remote_addr = C.uint64_t(wr.RemoteAddr)
	d.compare_add = C.uint64_t(wr.CompareAdd)
	d.swap = C.uint64_t(wr.Swap)
	d.rkey = C.uint32_t(wr.RKey)
	d.imm = C.uint32_t(wr.Imm)
	d.opcode = C.uint32_t(op)
	d.flags = C.uint32_t(flags)
	d.num_sge = C.uint32_t(len(wr.SGL))
	return nil
}

// nthSend returns the request i places after wr.
func nthSend(wr *verbs.SendWR, i int) *verbs.SendWR {
	for ; i > 0 && wr != nil; i-- {
		wr = wr.Next
	}
	return wr
}

// postErr turns a failed ibv_post_send/recv into a verbs error.
func (q *qp) postErr(what string, rc C.int) error {
	switch syscall.Errno(rc) {
	case syscall.ENOMEM:
		return fmt.Errorf("%w: %s on QP %d", verbs.ErrQueueFull, what, q.num)
	case syscall.EINVAL:
		if st := C.rg_qp_state(q.qp); st == C.IBV_QPS_ERR || st == C.IBV_QPS_RESET {
			return fmt.Errorf("%w: %s: QP %d is in the error state", verbs.ErrQPState, what, q.num)
		}
	}
	return rcErr(what, rc)
}

// PostSend posts the chain in one cgo call per 64 requests. Invalid requests
// are caught before posting: the ones before it are posted, and it is
// returned with an error wrapping verbs.ErrInvalid. Once the requests are
// posted the caller may yield to Go's scheduler, at most once a
// millisecond per context (pacer.go).
func (q *qp) PostSend(first *verbs.SendWR) (*verbs.SendWR, error) {
	bad, err := q.postSend(first)
	q.c.pace.posted()
	return bad, err
}

// postSend is PostSend under the send lock.
func (q *qp) postSend(first *verbs.SendWR) (*verbs.SendWR, error) {
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	switch q.state {
	case qpClosed:
		return first, verbs.ErrClosed
	case qpInit:
		return first, fmt.Errorf("%w: queue pair %d is not connected", verbs.ErrQPState, q.num)
	}
	wr := first
	for wr != nil {
		batch := wr
		n, ns := 0, 0
		var verr error
		for wr != nil && n < len(q.sd) {
			if len(wr.SGL) > q.maxSGE {
				verr = fmt.Errorf("%w: %d SGEs (queue pair max %d)", verbs.ErrInvalid, len(wr.SGL), q.maxSGE)
				break
			}
			if verr = q.fillSend(&q.sd[n], wr, q.ssg[ns:ns+len(wr.SGL)]); verr != nil {
				break
			}
			ns += len(wr.SGL)
			n++
			wr = wr.Next
		}
		if n > 0 {
			if r := C.rg_post_send(cAddr(unsafe.Pointer(q.sq)), C.int(n)); r != 0 {
				return nthSend(batch, int(r>>32)), q.postErr("ibv_post_send", C.int(int32(r)))
			}
		}
		if verr != nil {
			return wr, verr
		}
	}
	return nil, nil
}

// PostRecv posts the chain of receives in one cgo call per 64 requests.
// Receives may be posted before Connect.
func (q *qp) PostRecv(first *verbs.RecvWR) (*verbs.RecvWR, error) {
	q.recvMu.Lock()
	defer q.recvMu.Unlock()
	if q.rd == nil {
		return first, verbs.ErrClosed
	}
	wr := first
	for wr != nil {
		batch := wr
		n, ns := 0, 0
		var verr error
		for wr != nil && n < len(q.rd) {
			if len(wr.SGL) > q.maxSGE {
				verr = fmt.Errorf("%w: %d SGEs (queue pair max %d)", verbs.ErrInvalid, len(wr.SGL), q.maxSGE)
				break
			}
			for i, s := range wr.SGL {
				g := &q.rsg[ns+i]
				g.addr, g.length, g.lkey = C.uint64_t(s.Addr), C.uint32_t(s.Length), C.uint32_t(s.LKey)
			}
			q.rd[n].wr_id = C.uint64_t(wr.ID)
			q.rd[n].num_sge = C.uint32_t(len(wr.SGL))
			ns += len(wr.SGL)
			n++
			wr = wr.Next
		}
		if n > 0 {
			if r := C.rg_post_recv(cAddr(unsafe.Pointer(q.rq)), C.int(n)); r != 0 {
				for i := int(r >> 32); i > 0 && batch.Next != nil; i-- {
					batch = batch.Next
				}
				return batch, q.postErr("ibv_post_recv", C.int(int32(r)))
			}
		}
		if verr != nil {
			return wr, verr
		}
	}
	return nil, nil
}
