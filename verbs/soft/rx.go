package soft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rmago/rmago/verbs"
)

// The receive engine of a connection can be driven by two kinds of
// goroutine:
//
//   - the queue pair's reader goroutine (serve), which sleeps until the
//     context's sleeper sees data on the socket (sleeper.go), so that the
//     peer's requests execute while this program computes and calls
//     nothing;
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

// serve is the connection's reader goroutine: the NIC's receive engine
// when no waiting goroutine drives it (see rx.go). It executes the peer's
// requests against registered memory and completes this side's requests
// from the peer's responses, sleeping in between.
func (q *qp) serve() {
	defer q.finished.Done()
	defer func() {
		// Wait for a waiting goroutine that may be inside a frame, so
		// that no memory is released under a payload being received.
		q.rxMu.Lock()
		q.rxDone = true
		q.dropFrame()
		q.rxMu.Unlock()
		q.mu.Lock()
		q.failPendingLocked()
		q.mu.Unlock()
	}()
	for {
		q.rxMu.Lock()
		n, ok := q.drain(false, holdNone)
		q.rxMu.Unlock()
		if !ok {
			return
		}
		if n > 0 {
			q.ctx.prog.spinReader()
		}
		// Between frames the stream may rest as long as it likes.
		if err := q.rx.waitReadable(); err != nil {
			q.fail(verbs.StatusTransport, q.lost(err))
			return
		}
	}
}

// errAgain is a non-blocking read that found no data.
var errAgain = errors.New("soft: no data")

// midFrameSpin is how many empty non-blocking reads a goroutine makes for
// the rest of a frame that has begun to arrive before it sleeps in poll(2).
const midFrameSpin = 64

// rxStream is a connection's receive side: a buffer over non-blocking reads
// of the socket. Its methods are called by the owner of qp.rxMu only,
// except waitReadable and handOver (see there).
type rxStream struct {
	q    *qp
	fd   int // the socket, outside Go's network poller (sleeper.go); guarded by qp.fdMu
	buf  []byte
	r, w int
	got  uint64 // bytes read so far
	// emptied: the last read took less than it asked for, so the socket
	// held nothing more at that moment (drain then stops without one more
	// read, see there).
	emptied bool
	wake    chan struct{} // the sleeper saw data (cap 1)
	kick    chan struct{} // handOver (cap 1)
	// idle's record: the stream stood still at idleGot bytes since idleSince.
	idleGot   uint64
	idleSince time.Time
}

// newRxStream makes the receive side of the socket fd. attach puts it in
// the context's epoll set once the queue pair is ready to run frames.
func newRxStream(q *qp, fd int) *rxStream {
	return &rxStream{q: q, fd: fd, buf: make([]byte, 64<<10), wake: make(chan struct{}, 1), kick: make(chan struct{}, 1)}
}

// detachFD takes the socket of an authenticated connection out of Go's
// network poller (sleeper.go says why): it returns a non-blocking duplicate
// of its descriptor and closes conn, which the runtime then forgets. The
// socket stays open through the duplicate, so the peer sees nothing.
func detachFD(conn net.Conn) (int, error) {
	defer conn.Close()
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return -1, errors.New("soft: connection without a file descriptor")
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(old uintptr) { fd, derr = unix.FcntlInt(old, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, fmt.Errorf("duplicating the socket: %w", derr)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
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
		n, err := rawRead(s.fd, p)
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

// waitReadable is the reader goroutine's sleep between frames (rxMu not
// held): it arms the socket in the context's epoll set and waits until the
// sleeper sees data there, a waiting goroutine hands a frame over, or the
// queue pair fails. Arming reports data already there, so none is missed;
// a wake-up with nothing to read (the data went to a polling goroutine)
// costs one empty drain.
func (s *rxStream) waitReadable() error {
	q := s.q
	q.fdMu.RLock()
	if q.fdClosed {
		q.fdMu.RUnlock()
		return net.ErrClosed
	}
	err := q.ctx.prog.sl.arm(s)
	q.fdMu.RUnlock()
	if err != nil {
		return err
	}
	select {
	case <-s.wake:
	case <-s.kick:
	case <-q.done:
		return net.ErrClosed
	}
	return nil
}

// runReady is the sleeper's turn at a stream its socket's event named: it
// runs the frames that have arrived whole, as a waiting goroutine would,
// and arms the socket again, saving the hop to the reader goroutine. A
// frame that has only begun to arrive, or a stream another goroutine is
// reading, is left to the reader, woken for it: the sleeper never waits
// for one peer's data. It reports how many frames ran.
func (s *rxStream) runReady() int {
	q := s.q
	if !q.rxMu.TryLock() {
		s.wakeReader()
		return 0
	}
	n, ok := q.drain(true, holdNone)
	whole := ok && !q.cur.active && s.buffered() == 0
	if whole && q.ctx.prog.sl.oneShot {
		q.fdMu.RLock()
		whole = !q.fdClosed && q.ctx.prog.sl.arm(s) == nil
		q.fdMu.RUnlock()
	}
	q.rxMu.Unlock()
	if !whole {
		s.wakeReader()
	}
	return n
}

// wakeReader hands the stream to the reader goroutine, asleep in
// waitReadable, which arms the socket again when it is done with it.
func (s *rxStream) wakeReader() {
	if sl := &s.q.ctx.prog.sl; !sl.oneShot {
		s.q.fdMu.RLock()
		if !s.q.fdClosed {
			sl.disarm(s)
		}
		s.q.fdMu.RUnlock()
	}
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// pollFD waits in poll(2) until the socket is ready for events (POLLIN,
// POLLOUT) or has failed, or deadline (zero: none) has passed
// (os.ErrDeadlineExceeded). It holds the descriptor's read lock while it
// waits: fail shuts the socket down first, which ends the wait.
func (q *qp) pollFD(events int16, deadline time.Time) error {
	for {
		ms := -1
		if !deadline.IsZero() {
			d := time.Until(deadline)
			if d <= 0 {
				return os.ErrDeadlineExceeded
			}
			ms = int((d + time.Millisecond - 1) / time.Millisecond)
		}
		q.fdMu.RLock()
		if q.fdClosed {
			q.fdMu.RUnlock()
			return net.ErrClosed
		}
		fds := [1]unix.PollFd{{Fd: int32(q.rx.fd), Events: events}}
		n, err := unix.Poll(fds[:], ms)
		q.fdMu.RUnlock()
		switch {
		case err == unix.EINTR || (err == nil && n == 0):
			continue // the deadline is checked above
		case err != nil:
			return err
		}
		return nil // ready, hung up or failed: the next read or write finds out
	}
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
	s.emptied = n < len(s.buf)-s.w
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
		s.q.sendResponses()
	}
	*empty++
	if *empty < midFrameSpin {
		runtime.Gosched()
		return nil
	}
	*empty = 0
	var deadline time.Time
	if t := s.q.ctx.timeout; t > 0 {
		deadline = time.Now().Add(t)
	}
	return s.q.pollFD(unix.POLLIN|unix.POLLRDHUP, deadline)
}

// handOver wakes the reader goroutine to take the frame a waiting
// goroutine found incomplete and left: the reader runs it as soon as it is
// whole, and notices a peer that stopped sending it. rxMu held (by the
// waiting goroutine).
func (s *rxStream) handOver() {
	select {
	case s.kick <- struct{}{}:
	default:
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
	case kReqAcc, kReqAccFetch:
		if verbs.AccOp(h[32]) != verbs.AccNoOp { // the operand follows
			if n >= resumeMin {
				return true // applied in pieces (payload.go)
			}
			need += n
		}
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
	if _, _, e := syscall.RawSyscall(syscall.SYS_IOCTL, uintptr(s.fd), syscall.TIOCINQ, uintptr(unsafe.Pointer(&n))); e != 0 {
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
// it ran, a large payload received in part counting as one, and false
// once the stream is finished (failure or the peer's goodbye), after
// failing the queue pair as needed.
func (q *qp) drain(waiter bool, hold holdMode) (int, bool) {
	if q.rxDone {
		return 0, false
	}
	defer q.answer(hold)
	got := q.rx.got
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
				if q.rx.got != got {
					// Part of a payload came: as much progress as a frame
					// to a poller, which goes on spinning rather than
					// sleep through the rest of a large put (Poller,
					// spinCheck).
					n++
				}
				return n, true
			}
			continue
		}
		if n > 0 && q.rx.emptied && q.rx.buffered() == 0 {
			// The frames of the last read ran and the socket had nothing
			// more: answer them now rather than after one more read (a
			// system call that finds nothing, most of the time, on the
			// way of every round trip). What arrived since is still
			// there for the next poll; the socket stays readable, so
			// neither the level-triggered nor the re-armed one-shot
			// epoll entry misses it.
			return n, true
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
func (q *qp) poll(hold holdMode) int {
	if q.rx == nil || !q.rxMu.TryLock() {
		return 0
	}
	n, _ := q.drain(true, hold)
	q.rxMu.Unlock()
	return n
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

// rawRead is read(2) on a non-blocking socket, made without telling the
// Go scheduler (syscall.RawSyscall): it never blocks, and a polling
// goroutine makes many of them, each of which would otherwise let the
// runtime hand the goroutine's processor to another thread (and wake one)
// while it runs.
func rawRead(fd int, p []byte) (int, error) {
	var ptr unsafe.Pointer
	if len(p) > 0 {
		ptr = unsafe.Pointer(&p[0])
	}
	n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(ptr), uintptr(len(p)))
	if e != 0 {
		return 0, e
	}
	return int(n), nil
}
