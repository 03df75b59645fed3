package soft

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/internal/wcring"
)

// Completions: the completion queue, filled by whoever runs a queue
// pair's receive engine (or by posting, on a loopback pair) and drained by
// Poll and Wait, and the completion of a queue pair's requests into it.

// cq is a completion queue: a ring filled by the queue pairs' reader
// goroutines and drained by Poll and Wait.
type cq struct {
	mu     sync.Mutex
	ring   wcring.Ring // q.mu guards it
	closed bool
	notify chan struct{} // a token when entries were added
	timer  *time.Timer   // reused by Wait with a deadline
	prog   *progress
	// idle is when the Wait that found nothing began (Unix ns; 0: a
	// completion or a frame came since): a Wait that follows one that
	// timed out, with nothing between (a mixed job's slices), polls only
	// what is left of the first one's spin time, so a blocked rank sleeps.
	idle atomic.Int64
	// hook is called after each completion added (NotifyCompletions).
	hook atomic.Pointer[func()]
}

// NotifyCompletions makes push call f after each completion it adds
// (verbs.CompletionNotifier): a mixed job's waiter blocked in another
// provider's queue is woken by it.
func (q *cq) NotifyCompletions(f func()) {
	if f == nil {
		q.hook.Store(nil)
		return
	}
	q.hook.Store(&f)
}

// push adds a completion. A full CQ is an overrun, as on hardware: the
// entry is lost and the next Poll reports the error.
func (q *cq) push(wc verbs.WC) {
	q.mu.Lock()
	q.ring.Push(wc)
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
	if f := q.hook.Load(); f != nil {
		(*f)()
	}
}

// Poll first sends the corks of the context's queue pairs (coalesce.go):
// the caller may be waiting for what they hold.
func (q *cq) Poll(wc []verbs.WC) (int, error) {
	q.prog.sendCorks()
	q.mu.Lock()
	defer q.mu.Unlock()
	if err := q.ring.Err(); err != nil {
		return 0, err
	}
	if q.closed {
		return 0, verbs.ErrClosed
	}
	k := q.ring.Pop(wc)
	if k > 0 && q.idle.Load() != 0 {
		q.idle.Store(0)
	}
	return k, nil
}

// Wait first sends the corks of the context's queue pairs (coalesce.go),
// then drives their receive engines itself while frames keep coming
// (rx.go), then sleeps until a completion or the deadline.
func (q *cq) Wait(wc []verbs.WC, deadline time.Time) (int, error) {
	q.prog.sendCorks()
	q.prog.sendHeld() // held for a request this goroutine did not make
	if n, err := q.prog.spinWaiter(q, wc, deadline); n > 0 || err != nil {
		return n, err
	}
	for {
		if n, err := q.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if deadline.IsZero() {
			<-q.notify
			continue
		}
		d := time.Until(deadline)
		if d <= 0 {
			return 0, verbs.ErrTimeout
		}
		if q.timer == nil {
			q.timer = time.NewTimer(d)
		} else {
			q.timer.Reset(d)
		}
		select {
		case <-q.notify:
			q.timer.Stop()
		case <-q.timer.C:
		}
	}
}

func (q *cq) Close() error {
	q.mu.Lock()
	q.closed = true
	q.mu.Unlock()
	select {
	case q.notify <- struct{}{}:
	default:
	}
	return nil
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

// failPendingLocked completes everything outstanding after a failure; q.mu held.
func (q *qp) failPendingLocked() {
	for i := 0; q.pn > 0; i++ {
		st := verbs.StatusFlushed
		if i == 0 {
			st = q.failStatus
		}
		q.completeHead(st)
	}
	for q.recvs.Len() > 0 {
		e := q.recvs.Pop()
		q.recvCQ.push(verbs.WC{ID: e.ID, Status: verbs.StatusFlushed, Op: verbs.OpRecv, QPN: q.num})
	}
}
