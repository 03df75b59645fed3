//go:build ibv && linux && cgo

package ibv

/*
#include <stdlib.h> // C.calloc, C.free
#include "shim.h"
*/
import "C"

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// Completion queues: polling, and waiting with a busy phase that adapts
// to how soon completions come, then sleeping on the completion channel.

// cq is a completion queue created on its own completion channel, with
// C-side poll buffers.
//
// Wait polls for a while (spinBudget: a few microseconds on hardware), then
// sleeps on the channel: the waiter holding waitMu arms the CQ, polls once
// more, and blocks in poll() on the channel's fd (rg_cq_block). Poll never blocks and may run
// beside a blocked waiter: each has its own buffers, and ibv_poll_cq is
// thread-safe.
type cq struct {
	c   *devContext
	mu  sync.Mutex       // guards cq, raw, out, qps
	cq  *C.struct_ibv_cq // nil once closed
	raw *C.struct_ibv_wc // pollBatch ibv_wc, C memory
	out []C.rg_wc        // flattened completions, C memory
	pq  *C.rg_pollq      // cq, raw and out for rg_poll, C memory
	qps int              // queue pairs created on the CQ and not closed (counted once per role)

	waitMu  sync.Mutex   // one blocked waiter at a time; guards w's event state, wraw, wout
	w       *C.rg_waiter // the CQ, its channel and wake eventfd, C memory
	wraw    *C.struct_ibv_wc
	wout    []C.rg_wc
	closing atomic.Bool // Close has begun: waiters give up

	// The busy phase's tuning (spinBudget).
	sleepNs atomic.Int64 // what a sleep ended by a completion event takes: a low quantile of recent ones
	stepNs  atomic.Int64 // what one busy-phase step takes, averaged
}

// statusOf maps ibv_wc_status to verbs.Status.
var statusOf = func() (t [32]verbs.Status) {
	for i := range t {
		t[i] = verbs.StatusLocalError
	}
	t[C.IBV_WC_SUCCESS] = verbs.StatusSuccess
	t[C.IBV_WC_WR_FLUSH_ERR] = verbs.StatusFlushed
	t[C.IBV_WC_REM_ACCESS_ERR] = verbs.StatusRemoteAccess
	t[C.IBV_WC_REM_OP_ERR] = verbs.StatusRemoteOp
	t[C.IBV_WC_REM_INV_REQ_ERR] = verbs.StatusRemoteOp
	t[C.IBV_WC_REM_INV_RD_REQ_ERR] = verbs.StatusRemoteOp
	t[C.IBV_WC_REM_ABORT_ERR] = verbs.StatusRemoteOp
	t[C.IBV_WC_RETRY_EXC_ERR] = verbs.StatusTransport
	t[C.IBV_WC_BAD_RESP_ERR] = verbs.StatusTransport
	t[C.IBV_WC_RESP_TIMEOUT_ERR] = verbs.StatusTransport
	t[C.IBV_WC_FATAL_ERR] = verbs.StatusTransport
	t[C.IBV_WC_INV_EECN_ERR] = verbs.StatusTransport
	t[C.IBV_WC_INV_EEC_STATE_ERR] = verbs.StatusTransport
	t[C.IBV_WC_RNR_RETRY_EXC_ERR] = verbs.StatusRNR
	return t
}()

func opOf(o uint32) verbs.Opcode {
	switch o {
	case C.IBV_WC_SEND:
		return verbs.OpSend
	case C.IBV_WC_RDMA_WRITE:
		return verbs.OpWrite
	case C.IBV_WC_RDMA_READ:
		return verbs.OpRead
	case C.IBV_WC_COMP_SWAP:
		return verbs.OpCompareSwap
	case C.IBV_WC_FETCH_ADD:
		return verbs.OpFetchAdd
	case C.IBV_WC_RECV:
		return verbs.OpRecv
	case C.IBV_WC_RECV_RDMA_WITH_IMM:
		return verbs.OpRecvImm
	}
	return 0
}

// Poll moves up to len(wc) completions (at most 64 per call) into wc.
func (q *cq) Poll(wc []verbs.WC) (int, error) {
	if len(wc) == 0 {
		return 0, nil
	}
	q.mu.Lock()
	if q.cq == nil {
		q.mu.Unlock()
		return 0, verbs.ErrClosed
	}
	n := min(len(wc), len(q.out))
	k := int(C.rg_poll(cAddr(unsafe.Pointer(q.pq)), C.int(n)))
	if k > 0 {
		convertWCs(q.out[:k], wc)
	}
	q.mu.Unlock()
	if k < 0 {
		return 0, fmt.Errorf("ibv: ibv_poll_cq returned %d", k)
	}
	return k, nil
}

// convertWCs turns flattened completions into verbs.WCs.
func convertWCs(out []C.rg_wc, wc []verbs.WC) {
	for i := range out {
		s := &out[i]
		st := uint32(s.status)
		w := &wc[i]
		w.ID = uint64(s.wr_id)
		w.Status = verbs.StatusLocalError
		if st < uint32(len(statusOf)) {
			w.Status = statusOf[st]
		}
		w.Op = opOf(uint32(s.opcode))
		w.ByteLen = uint32(s.byte_len)
		w.Imm = uint32(s.imm)
		w.HasImm = s.has_imm != 0
		w.QPN = uint32(s.qp_num)
	}
}

// Wait returns completions as soon as there are some, or ErrTimeout at the
// deadline. It polls, then polls spinBudget more times with
// runtime.Gosched between polls (a completion that is microseconds away
// costs no system call), then sleeps on the CQ's completion channel until
// the device signals a new completion, the deadline passes or Close wakes
// it. It allocates nothing and starts no goroutine: the calling goroutine
// sleeps in a cgo call (its OS thread blocked in poll(), at most maxBlock at
// a time) and polls the CQ itself when woken.
func (q *cq) Wait(wc []verbs.WC, deadline time.Time) (int, error) {
	n, err := q.Poll(wc)
	if n > 0 || err != nil || len(wc) == 0 {
		return n, err
	}
	fixed := q.fixed()
	polls := q.spinBudget()
	var start time.Time
	if fixed < 0 {
		start = time.Now()
	}
	for range polls {
		runtime.Gosched()
		if n, err = q.Poll(wc); n > 0 || err != nil {
			return n, err
		}
	}
	if fixed < 0 {
		q.stepNs.Store(nextStep(q.stepNs.Load(), int64(time.Since(start))/int64(polls)))
	}
	return q.block(wc, deadline)
}

// fixed is the busy phase's length in polls that the context's
// verbs.Config.SpinPolls fixes (negative: 0), else fixedSpin's: -1 adapts.
func (q *cq) fixed() int {
	if n := q.c.spinPolls; n != 0 {
		return max(n, 0)
	}
	return fixedSpin
}

// spinBudget is the number of polls in Wait's busy phase. Spinning as long
// as a sleep and its wake-up cost is the classic rule (it is never worse
// than twice the best choice made knowing when the completion comes): the
// budget is the estimated cost of a sleep (sleepNs) over the cost of a
// poll (stepNs), between minSpin and maxSpin. On hardware, sleeps are
// cheap and the budget stays near minSpin; under an emulator, where an
// event takes hundreds of microseconds, it grows towards maxSpin. Waits
// that the busy phase satisfies leave the estimates as they are.
func (q *cq) spinBudget() int {
	if fixed := q.fixed(); fixed >= 0 {
		return fixed
	}
	sl, st := q.sleepNs.Load(), q.stepNs.Load()
	if sl <= 0 || st <= 0 {
		return minSpin
	}
	return int(min(max(sl/st, minSpin), maxSpin))
}

// nextSleep updates the estimate of what a sleep costs with one sleep's
// duration. It tracks the lower quartile of the durations: a sleep lasts
// the wake-up's cost plus however long the completion took to come, so the
// shorter sleeps tell the cost, and a quantile is not thrown by one event
// that was already pending. Steps are 1/16 of the estimate down and a
// third of that up, so a quarter of the samples end up below it.
func nextSleep(est, sample int64) int64 {
	if est <= 0 {
		return max(sample, 1)
	}
	step := max(est/16, 3)
	if sample < est {
		return max(est-step, 1)
	}
	return min(est+step/3, max(sample, est))
}

// nextStep folds one measurement of a busy-phase step into the average.
func nextStep(avg, sample int64) int64 {
	if avg <= 0 {
		return max(sample, 1)
	}
	return max(avg+(sample-avg)/8, 1)
}

// block is Wait's sleeping phase.
func (q *cq) block(wc []verbs.WC, deadline time.Time) (int, error) {
	q.waitMu.Lock()
	defer q.waitMu.Unlock()
	for {
		if q.closing.Load() {
			return 0, verbs.ErrClosed
		}
		timeout := maxBlock
		if !deadline.IsZero() {
			left := time.Until(deadline)
			if left <= 0 {
				// Polled after the last sleep: nothing came in time.
				return 0, verbs.ErrTimeout
			}
			timeout = min(timeout, left)
		}
		ms := int((timeout + time.Millisecond - 1) / time.Millisecond) // poll() rounds up too
		n := min(len(wc), len(q.wout))
		t := time.Now()
		k := int(C.rg_cq_block(q.w, C.int(n), q.wraw, &q.wout[0], C.int(ms)))
		switch {
		case k > 0:
			if q.w.slept != 0 && q.fixed() < 0 {
				q.sleepNs.Store(nextSleep(q.sleepNs.Load(), int64(time.Since(t))))
			}
			convertWCs(q.wout[:k], wc)
			return k, nil
		case k == C.RG_WOKEN:
			// Close woke us; the closing check above ends the wait.
		case k < 0:
			return 0, errnoErr("waiting for a completion event", syscall.Errno(-k))
		}
	}
}

func (q *cq) detach() {
	q.mu.Lock()
	q.qps--
	q.mu.Unlock()
}

// Close destroys the queue and its completion channel; its QPs must be
// closed first. A goroutine blocked in Wait is woken and gets ErrClosed.
func (q *cq) Close() error {
	q.mu.Lock()
	if q.cq == nil || q.closing.Load() {
		q.mu.Unlock()
		return verbs.ErrClosed
	}
	if q.qps > 0 {
		q.mu.Unlock()
		return fmt.Errorf("ibv: ibv_destroy_cq: queue pairs still attached: %w", syscall.EBUSY)
	}
	q.closing.Store(true)
	C.rg_wake(q.w)
	q.mu.Unlock()
	q.waitMu.Lock() // the woken waiter has left
	defer q.waitMu.Unlock()
	q.mu.Lock()
	defer q.mu.Unlock()
	if rc := C.rg_destroy_cq(q.w); rc != 0 {
		C.rg_unwake(q.w)
		q.closing.Store(false)
		return rcErr("ibv_destroy_cq", rc)
	}
	q.cq, q.w = nil, nil
	C.free(unsafe.Pointer(q.raw))
	C.free(unsafe.Pointer(&q.out[0]))
	C.free(unsafe.Pointer(q.wraw))
	C.free(unsafe.Pointer(&q.wout[0]))
	C.free(unsafe.Pointer(q.pq))
	q.raw, q.out, q.wraw, q.wout, q.pq = nil, nil, nil, nil, nil
	return nil
}

// QP states as this provider tracks them.
const (
	qpInit = iota
	qpRTS
	qpClosed
)
