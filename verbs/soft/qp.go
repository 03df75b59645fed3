package soft

import (
	"fmt"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/internal/recvq"
)

// The queue pair: its state, its creation, its error state and its close.
// Its roles live beside it: requester.go posts, responder.go executes the
// peer's requests, reply.go answers them, completion.go completes, rx.go
// and payload.go receive, connection.go and connmgr.go connect.

// maxSGE is the most scatter-gather entries a request may carry.
const maxSGE = 4

// postBatch is the most frames of one chain of work requests sent in one
// gather write (one system call).
const postBatch = 32

// maxIov is the longest gather list of a write: a batch's frames and
// their payloads, each frame after a piece of the cork, and the rest of
// the cork.
const maxIov = postBatch*(2+maxSGE) + 1

// Queue pair states.
const (
	stInit = iota
	stRTS
	stError
)

type qp struct {
	ctx     *device
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
	bufs    [maxIov][]byte
	nframes int
	nbufs   int
	nextSeq uint64
	// The cork (coalesce.go): frames of small unsignalled requests waiting
	// for the next write. cork[:corkRef] is already in bufs.
	cork      []byte // corkSize, allocated at attach
	corkLen   int
	corkRef   int
	corkLast  int           // offset of the cork's last frame (mergeWrite), valid while corkLen > 0
	corked    atomic.Bool   // corkLen > 0 (read by pollers without sendMu)
	corkTimer *time.Timer   // sends the cork corkDelay after its first frame
	corkArmed bool          // corkTimer is set (sendMu)
	corkShort time.Duration // corkTimer was set for this, by armCork (0: for corkDelay); sendMu
	// What the cork's timer needs to tell traffic left behind (hold.go):
	// awaited frames in the cork, writes of the cork or of held answers so
	// far, their count when the timer was set, and whether the timer is
	// the one sending (all under sendMu but sends, which the receive
	// engine counts too).
	corkAwaited int
	sends       atomic.Uint64
	armSends    uint64
	expiring    bool

	// mu guards the state, the pending ring and the receive ring; cond
	// wakes posters waiting for earlier reads (the Fence flag).
	mu         sync.Mutex
	cond       sync.Cond
	state      int
	failed     atomic.Bool // state is stError (read without mu by mergeFast)
	remote     verbs.Endpoint
	pend       []pending
	phead      int
	pn         int
	ordered    int // pending reads and atomics, for Fence
	recvs      recvq.Queue
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
	guard  bool                   // the guard atomics' outcome (guard.go); under rxMu
	cur    inFrame                // a payload received in pieces (payload.go); under rxMu
	acc    accState               // the responder's accumulate buffers (accumulate.go)
	curReg atomic.Pointer[region] // cur's target region, for Dereg (failHolders)

	// fdMu guards the socket's descriptor against being closed during a
	// raw read; fdClosed is set (under fdMu) before the connection closes.
	fdMu     sync.RWMutex
	fdClosed bool

	// wrMu serializes whole writes to the connection: requests (posters),
	// queued responses (writer goroutine), immediate responses (TryLock).
	wrMu       sync.Mutex
	respMu     sync.Mutex // guards respQueued, readsQueued and heldRecvs
	respQueued int        // responses handed to the writer goroutine, not yet written
	// Answers that bring data among respQueued, and the receive
	// completions held until they are written (recvafter.go).
	readsQueued int
	heldRecvs   []verbs.WC
	resps       [respBatch]response // collected by the receive engine (rxMu)
	nresp       int
	batchReads  int // read responses straight from registered memory among resps[:nresp] (rxMu)
	batchData   int // answers that bring data (bringsData) among resps[:nresp] (rxMu)
	respHdrs    [respBatch][hdrLen]byte
	// respHeld: resps holds answers for the next request write (held.go).
	respHeld atomic.Bool
	// Every write's gather list, under wrMu (write.go): requests (a batch
	// of postBatch frames), immediate and queued responses.
	iov  [maxIov]syscall.Iovec
	iovN int
	wrN  int
	// withHeld is the gather list of a request write that carries held
	// answers: their headers and data (in heldSlab), then the requests
	// (wrMu).
	withHeld [1 + maxIov][]byte
	// heldRecvsBehind: receive completions held behind the answers a
	// request write took (wrMu); they complete once it is done.
	heldRecvsBehind int
	heldSlab        [respBatch * (hdrLen + smallRead)]byte
}

func (p *pd) CreateQP(attr verbs.QPAttr) (verbs.QP, error) {
	scq, ok1 := attr.SendCQ.(*cq)
	rcq, ok2 := attr.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, fmt.Errorf("%w: completion queues must come from the soft provider", verbs.ErrInvalid)
	}
	if err := verbs.CheckQPAttr(attr, deviceAttr()); err != nil {
		return nil, err
	}
	c := p.ctx
	q := &qp{
		ctx: c, pd: p, sendCQ: scq, recvCQ: rcq,
		maxSend: attr.MaxSendWR, maxRecv: attr.MaxRecvWR,
		connCh: make(chan acceptedConn, 1),
		pend:   make([]pending, attr.MaxSendWR),
		recvs:  recvq.New(attr.MaxRecvWR),
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

// Close destroys the queue pair. A connected queue pair first says goodbye:
// it tells the peer the last of its requests that was executed, so the
// peer completes those and fails only later ones, and does not take the
// orderly close for a failure. Outstanding requests complete as flushed.
func (q *qp) Close() error {
	q.mu.Lock()
	rts := q.state == stRTS
	q.mu.Unlock()
	if rts {
		q.sendMu.Lock()
		q.sendQueued()      // what the cork holds goes before the goodbye
		q.sendHeldAnswers() // and the answers held for a request (held.go)
		f := frame{kind: kGoodbye, seq: q.lastExec.Load()}
		f.encode(&q.hdr)
		q.wrMu.Lock()
		q.writeBlocking([][]byte{q.hdr[:]}, time.Second)
		q.wrMu.Unlock()
		loop := q.loop
		q.sendMu.Unlock()
		q.fdMu.RLock()
		if !q.fdClosed {
			unix.Shutdown(q.rx.fd, unix.SHUT_WR)
		}
		q.fdMu.RUnlock()
		// The peer answers with its own end of stream; wait for it
		// briefly so that closing does not reset data still in flight.
		q.awaitEnd(loop, time.Second)
	}
	q.fail(verbs.StatusFlushed, verbs.ErrClosed)
	q.sendMu.Lock()
	if q.corkTimer != nil {
		q.corkTimer.Stop()
	}
	q.sendMu.Unlock()
	q.finished.Wait()
	q.ctx.prog.detach(q)
	q.ctx.mu.Lock()
	delete(q.ctx.qps, q.num)
	q.ctx.mu.Unlock()
	return nil
}

// awaitEnd waits up to d for the peer's end of stream after this side's
// goodbye. On a loopback pair (loop, the other end) it reads both ends itself: spinners read
// their sockets only every loopPassEvery-th pass (progress.go), and a
// spinner kept busy by other peers' frames, yielding its core on a
// crowded node between passes, took a second to get there.
func (q *qp) awaitEnd(loop *qp, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		if loop != nil {
			loop.poll(holdNone)
			q.poll(holdNone)
		}
		select {
		case <-q.done:
			return
		case <-t.C:
			return
		default:
		}
		if loop == nil {
			select {
			case <-q.done:
			case <-t.C:
			}
			return
		}
		time.Sleep(20 * time.Microsecond)
	}
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
	q.failed.Store(true)
	q.failStatus = status
	q.failErr = cause
	if q.rx != nil {
		// Shutting the socket down ends the waits in poll(2) on it, which
		// hold the descriptor's read lock.
		unix.Shutdown(q.rx.fd, unix.SHUT_RDWR)
		q.ctx.prog.sl.remove(q.rx)
		q.fdMu.Lock()
		q.fdClosed = true
		q.fdMu.Unlock()
		unix.Close(q.rx.fd)
	}
	if !running {
		q.failPendingLocked()
	}
	q.cond.Broadcast()
	q.mu.Unlock()
	close(q.done)
}
