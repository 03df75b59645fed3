package soft

import (
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// The receive engine of a connection can be driven by two kinds of
// goroutine:
//
//   - the queue pair's reader goroutine (serve), which sleeps in Go's
//     network poller until the socket is readable, so that the peer's
//     requests execute while this program computes and calls nothing;
//   - a goroutine waiting for something (cq.Wait, or a poll of local
//     memory through context.Progress), which polls the sockets with
//     non-blocking reads and runs the frames it finds itself.
//
// The second is how MPI libraries progress over TCP, and it is what makes a
// small round trip cost a pair of system calls on each side instead of two
// or three wake-ups of sleeping goroutines (on a 2-core VM, a put+flush
// takes about 20 µs instead of 80). One goroutine at a time owns a stream
// (qp.rxMu), so frames execute in order whoever runs them, and at most one
// goroutine of the process spins (progress.token).

// frameReader is what the responder reads frames and payloads from: the
// connection's rxStream, or any buffered reader in tests.
type frameReader interface {
	io.Reader
	Discard(n int) (int, error)
}

// errAgain is a non-blocking read that found no data.
var errAgain = errors.New("soft: no data")

// midFrameSpin is how many empty non-blocking reads a goroutine makes for
// the rest of a frame that has begun to arrive before it sleeps in the
// network poller.
const midFrameSpin = 64

// rxStream is a connection's receive side: a buffer over non-blocking reads
// of the socket. Its methods are called by the owner of qp.rxMu only.
type rxStream struct {
	q     *qp
	conn  net.Conn
	rc    syscall.RawConn
	fd    int
	buf   []byte
	r, w  int
	peek  [1]byte
	ready func(uintptr) bool // readableFn, bound once (no allocation per wait)
	dl    bool               // a read deadline is set (a frame waited for its rest, or handOver)
	got   uint64             // bytes read so far
	// idle's record: the stream stood still at idleGot bytes since idleSince.
	idleGot   uint64
	idleSince time.Time
}

func newRxStream(q *qp, conn net.Conn) (*rxStream, error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("soft: connection without a file descriptor")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	s := &rxStream{q: q, conn: conn, rc: rc, buf: make([]byte, 64<<10)}
	if err := rc.Control(func(fd uintptr) { s.fd = int(fd) }); err != nil {
		return nil, err
	}
	s.ready = s.readableFn
	return s, nil
}

// sysRead is one non-blocking read(2) of the socket, guarded against the
// descriptor being closed (and its number reused) meanwhile.
func (s *rxStream) sysRead(p []byte) (int, error) {
	q := s.q
	for {
		q.fdMu.RLock()
		if q.fdClosed {
			q.fdMu.RUnlock()
			return 0, net.ErrClosed
		}
		n, err := syscall.Read(s.fd, p)
		q.fdMu.RUnlock()
		switch {
		case n > 0:
			s.got += uint64(n)
			return n, nil
		case err == syscall.EAGAIN:
			return 0, errAgain
		case err == syscall.EINTR:
			continue
		case err == nil:
			return 0, io.EOF
		default:
			return 0, err
		}
	}
}

// readableFn is rc.Read's function for waitReadable: it peeks at the
// socket without consuming anything and declines (so the runtime sleeps
// until the poller sees data) only if nothing is there. Checking under the
// descriptor's read lock, as a read would, is what makes the sleep safe:
// data that came before it is seen by the peek, data after it wakes it.
func (s *rxStream) readableFn(fd uintptr) bool {
	for {
		_, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, fd, uintptr(unsafe.Pointer(&s.peek[0])), 1,
			syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
		switch e {
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return false
		}
		return true // data, end of stream or an error: the reader finds out
	}
}

// waitReadable sleeps in the network poller until the socket has data,
// unless it has some already.
func (s *rxStream) waitReadable() error {
	return s.rc.Read(s.ready)
}

// buffered is how many received bytes wait in the buffer.
func (s *rxStream) buffered() int { return s.w - s.r }

// fill reads what the socket has into the buffer without blocking.
func (s *rxStream) fill() error {
	if s.r == s.w {
		s.r, s.w = 0, 0
	} else if s.w == len(s.buf) {
		s.w = copy(s.buf, s.buf[s.r:s.w])
		s.r = 0
	}
	n, err := s.sysRead(s.buf[s.w:])
	s.w += n
	return err
}

// await handles an empty read in the middle of a frame: spin a little,
// then sleep in the poller until more arrives, for at most the context's
// timeout: a peer that stopped in the middle of a frame fails the queue
// pair (with verbs.ErrTimeout) instead of holding the stream, and the
// region its payload was going to, for ever.
func (s *rxStream) await(empty *int) error {
	if *empty == 0 {
		// Answer what already ran before waiting for the rest.
		s.q.flushResponses()
	}
	*empty++
	if *empty < midFrameSpin {
		runtime.Gosched()
		return nil
	}
	*empty = 0
	if t := s.q.ctx.timeout; t > 0 {
		s.conn.SetReadDeadline(time.Now().Add(t))
		s.dl = true
	} else {
		s.clearDeadline() // handOver's
	}
	return s.waitReadable()
}

// handOver wakes the reader goroutine (with a deadline in the past) to
// take the frame a waiting goroutine found incomplete and left: the reader
// runs it as soon as it is whole, and notices a peer that stopped sending
// it. rxMu held.
func (s *rxStream) handOver() {
	if !s.dl {
		s.conn.SetReadDeadline(time.Unix(1, 0))
		s.dl = true
	}
}

// clearDeadline removes the read deadline a frame set, before the reader
// goroutine sleeps between frames; rxMu held.
func (s *rxStream) clearDeadline() {
	if s.dl {
		s.conn.SetReadDeadline(time.Time{})
		s.dl = false
	}
}

// frameReady reports whether a waiting goroutine may run the next frame:
// it has arrived whole (in the buffer, or in the socket's receive queue),
// so that running it never waits for the peer, or it is a large write or
// read response, whose payload is received in pieces (payload.go). A
// waiting goroutine that waited for the rest of a frame from a peer that
// stopped would stop with it, and with it every wait of the process on the
// other peers (it is their poller).
func (s *rxStream) frameReady() bool {
	if s.buffered() < hdrLen {
		if s.r > 0 {
			s.w = copy(s.buf, s.buf[s.r:s.w])
			s.r = 0
		}
		if err := s.fill(); err != nil && err != errAgain {
			return true // running it meets the error and fails the queue pair
		}
		if s.buffered() < hdrLen {
			return false
		}
	}
	h := s.buf[s.r : s.r+hdrLen]
	need := hdrLen
	n := int(binary.LittleEndian.Uint32(h[4:]))
	switch h[0] {
	case kReqWrite, kReqWriteImm, kRespRead:
		if n >= resumeMin {
			return true // received in pieces (payload.go)
		}
		need += n
	case kReqSend:
		need += n
	}
	return s.buffered() >= need || s.buffered()+s.inq() >= need
}

// inq is how many received bytes wait in the socket.
func (s *rxStream) inq() int {
	q := s.q
	q.fdMu.RLock()
	defer q.fdMu.RUnlock()
	if q.fdClosed {
		return 0
	}
	var n int32
	if _, _, e := syscall.Syscall(syscall.SYS_IOCTL, uintptr(s.fd), syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); e != 0 {
		return 0
	}
	return int(n)
}

// Read fills p completely (it is used through io.ReadFull), blocking as
// long as the frame takes to arrive. Large reads go straight from the
// socket into p.
func (s *rxStream) Read(p []byte) (int, error) {
	n := copy(p, s.buf[s.r:s.w])
	s.r += n
	empty := 0
	for n < len(p) {
		var (
			k   int
			err error
		)
		if len(p)-n >= len(s.buf)/2 {
			k, err = s.sysRead(p[n:])
		} else {
			err = s.fill()
			k = copy(p[n:], s.buf[s.r:s.w])
			s.r += k
		}
		n += k
		if err == errAgain {
			if err := s.await(&empty); err != nil {
				return n, err
			}
		} else if err != nil {
			return n, err
		}
	}
	return n, nil
}

// Discard skips n bytes of the stream, blocking until they have arrived.
func (s *rxStream) Discard(n int) (int, error) {
	done, empty := 0, 0
	for done < n {
		if s.r == s.w {
			if err := s.fill(); err == errAgain {
				if err := s.await(&empty); err != nil {
					return done, err
				}
				continue
			} else if err != nil {
				return done, err
			}
		}
		k := min(n-done, s.w-s.r)
		s.r += k
		done += k
	}
	return done, nil
}

// frameWaiting reports whether a frame has begun to arrive, reading the
// socket once without blocking if the buffer is empty.
func (s *rxStream) frameWaiting() (bool, error) {
	if s.buffered() > 0 {
		return true, nil
	}
	err := s.fill()
	if err == errAgain {
		return false, nil
	}
	return s.buffered() > 0, err
}

// drain runs every frame that has begun to arrive (waiter: every frame
// that has arrived whole, see frameReady); rxMu held. It reports how many
// it ran, and false once the stream is finished (failure or the peer's
// goodbye), after failing the queue pair as needed.
func (q *qp) drain(waiter bool) (int, bool) {
	if q.rxDone {
		return 0, false
	}
	defer q.flushResponses()
	for n := 0; ; n++ {
		if q.cur.active {
			done, err := q.resume(waiter)
			if err != nil {
				q.rxDone = true
				q.fail(verbs.StatusTransport, q.lost(err))
				return n, false
			}
			if !done {
				q.rx.idle()
				return n, true
			}
			continue
		}
		more, err := q.rx.frameWaiting()
		if err != nil {
			q.rxDone = true
			q.fail(verbs.StatusTransport, q.lost(err))
			return n, false
		}
		if !more {
			return n, true
		}
		if waiter && !q.rx.frameReady() {
			q.rx.idle()
			return n, true
		}
		if !q.step(q.rx) {
			q.rxDone = true
			return n + 1, false
		}
	}
}

// poll lets a waiting goroutine run what has arrived on this queue pair,
// unless another goroutine is doing so. It reports how many frames it ran.
func (q *qp) poll() int {
	if q.rx == nil || !q.rxMu.TryLock() {
		return 0
	}
	n, _ := q.drain(true)
	q.rxMu.Unlock()
	return n
}

// DefaultSpin is how long a spinner goes on polling after the last frame
// it ran before it sleeps, unless verbs.Config.Spin (RMAGO_SOFT_SPIN
// through transport) says otherwise. It covers a few round trips on
// loopback TCP.
const DefaultSpin = 100 * time.Microsecond

// spinOf is the polling time verbs.Config.Spin asks for: 0 is
// DefaultSpin, negative never polls.
func spinOf(cfg verbs.Config) time.Duration {
	switch {
	case cfg.Spin == 0:
		return DefaultSpin
	case cfg.Spin < 0:
		return 0
	}
	return cfg.Spin
}

// progress drives the receive engines of a context's connected queue
// pairs by polling. At most one goroutine of the process spins at a time
// (two spinners on a small machine steal each other's cores):
//
//   - a goroutine waiting in cq.Wait, which has priority, since it can
//     return the completion it finds without waking anyone;
//   - otherwise the reader goroutine that last woke up with frames, so
//     that a rank busy elsewhere (or asleep in a barrier) still answers a
//     stream of one-sided requests at polling speed.
//
// A spinner stops when nothing has arrived for spinFor; then the reader
// goroutines sleep in the network poller again.
type progress struct {
	spinFor  time.Duration // set at Open
	mu       sync.Mutex
	qps      atomic.Pointer[[]*qp] // connected queue pairs (copy on write, under mu)
	token    atomic.Int32          // 0: nobody spins; spinReader; spinWaiter
	waiters  atomic.Int32          // goroutines in cq.Wait that want the token
	handover atomic.Bool           // a Progress caller wants the token
}

const (
	spinReader = 1
	spinWaiter = 2
)

// attach lists a connected queue pair.
func (g *progress) attach(p *qp) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var list []*qp
	if old := g.qps.Load(); old != nil {
		list = append(list, *old...)
	}
	list = append(list, p)
	g.qps.Store(&list)
}

// detach removes a closed queue pair.
func (g *progress) detach(p *qp) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.qps.Load()
	if old == nil {
		return
	}
	list := make([]*qp, 0, len(*old))
	for _, x := range *old {
		if x != p {
			list = append(list, x)
		}
	}
	g.qps.Store(&list)
}

// pollAll runs what has arrived on every queue pair; it reports how many
// frames ran.
func (g *progress) pollAll() int {
	list := g.qps.Load()
	if list == nil {
		return 0
	}
	ran := 0
	for _, p := range *list {
		ran += p.poll()
	}
	return ran
}

// spinWaiter is cq.Wait's busy phase: it takes the token (a spinning
// reader goroutine hands it over at once) and polls every queue pair until
// cq has a completion, or nothing has arrived for spinFor, or the deadline
// has passed. If another waiter spins, it returns at once.
func (g *progress) spinWaiter(q *cq, wc []verbs.WC, deadline time.Time) (int, error) {
	if g.spinFor <= 0 {
		return 0, nil
	}
	g.waiters.Add(1)
	defer g.waiters.Add(-1)
	for {
		t := g.token.Load()
		if t == spinWaiter {
			return 0, nil
		}
		if t == 0 && g.token.CompareAndSwap(0, spinWaiter) {
			break
		}
		// A reader goroutine is handing the token over (it may first
		// finish draining a burst, and complete our request meanwhile).
		if n, err := q.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		runtime.Gosched()
	}
	defer g.token.Store(0)
	end := time.Now().Add(g.spinFor)
	if !deadline.IsZero() && deadline.Before(end) {
		end = deadline
	}
	ran := 0
	for i := 1; ; i++ {
		ran += g.pollAll()
		if n, err := q.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		if i%8 == 0 {
			now := time.Now()
			if ran > 0 {
				// Frames keep coming: keep serving them.
				ran = 0
				end = now.Add(g.spinFor)
				if !deadline.IsZero() && deadline.Before(end) {
					end = deadline
				}
			} else if now.After(end) {
				return 0, nil
			}
		}
		runtime.Gosched()
	}
}

// spinReader is a reader goroutine's busy phase after it woke up with
// frames: if nobody spins, it polls every queue pair until nothing has
// arrived for spinFor, or a waiter wants the token.
func (g *progress) spinReader() {
	if g.spinFor <= 0 || g.waiters.Load() > 0 || !g.token.CompareAndSwap(0, spinReader) {
		return
	}
	defer func() {
		g.handover.Store(false)
		g.token.Store(0)
	}()
	end := time.Now().Add(g.spinFor)
	for i := 1; g.waiters.Load() == 0 && !g.handover.Load(); i++ {
		if g.pollAll() > 0 {
			end = time.Now().Add(g.spinFor)
		} else if i%8 == 0 && time.Now().After(end) {
			return
		}
		runtime.Gosched()
	}
}

// step reads one frame from fr and runs it: a request of the peer executes
// against registered memory, a response completes one of this side's
// requests. It returns false once the stream is finished, having failed the
// queue pair if it ended badly. The caller owns the stream (rxMu).
func (q *qp) step(fr frameReader) bool {
	if _, err := io.ReadFull(fr, q.rxHdr[:]); err != nil {
		q.fail(verbs.StatusTransport, q.lost(err))
		return false
	}
	var f frame
	if err := f.decode(&q.rxHdr); err != nil {
		q.fail(verbs.StatusTransport, q.lost(err))
		return false
	}
	acquire()
	if q.resumable(fr, &f) {
		if err := q.begin(&f); err != nil {
			q.fail(verbs.StatusTransport, q.lost(err))
			return false
		}
		return true // drain goes on with its payload
	}
	var err error
	switch {
	case f.kind < kRespAck:
		err = q.execute(fr, &f)
		q.lastExec.Store(f.seq)
	case f.kind == kGoodbye:
		q.goodbye(&f)
		return false
	default:
		err = q.complete(fr, &f)
	}
	if err != nil {
		q.fail(verbs.StatusTransport, q.lost(err))
		return false
	}
	return true
}

// Progress runs what has arrived on the context's queue pairs
// (verbs.Progresser) as a waiter, which keeps the token until EndProgress:
// a spinning reader goroutine is asked to hand it over (this call then
// returns false; the next one polls). It reports whether any frame ran.
func (c *context) Progress() bool {
	g := &c.prog
	if g.spinFor <= 0 {
		return false
	}
	switch g.token.Load() {
	case spinWaiter: // a waiting goroutine polls: this one, or another
	case 0:
		if !g.token.CompareAndSwap(0, spinWaiter) {
			return false
		}
	default:
		g.handover.Store(true)
		return false
	}
	return g.pollAll() > 0
}

// EndProgress gives the token back (verbs.Progresser).
func (c *context) EndProgress() {
	c.prog.token.CompareAndSwap(spinWaiter, 0)
}
