package soft

import (
	"errors"
	"fmt"
	"net"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rmago/rmago/verbs"
)

// Writes to a connection, and the errors of a connection that fails.
//
// A peer that stopped reading (a stopped or hung process) must not block a
// writer for ever: a poster would hold its queue pair's locks, the writer
// goroutine would hold the regions of the read responses it sends, and
// deregistering them would wait too. Every write is therefore bounded by
// the context's timeout without progress. A write first goes out with one
// non-blocking writev, which is all it takes while the socket has room;
// only the rest of a write that would block waits for room, in poll(2).

// writeLocked writes bufs whole to the connection; wrMu held. The entries
// of bufs may be changed.
func (q *qp) writeLocked(bufs [][]byte) error {
	n, total := 0, 0
	for _, b := range bufs {
		if len(b) == 0 {
			continue
		}
		q.iov[n] = syscall.Iovec{Base: &b[0]}
		q.iov[n].SetLen(len(b))
		n++
		total += len(b)
	}
	if n == 0 {
		return nil
	}
	q.iovN, q.wrN = n, 0
	err := q.writev()
	clear(q.iov[:n])
	if err != nil && err != errAgain {
		return err
	}
	if q.wrN == total {
		return nil
	}
	// The socket is full: skip what went, then block for the rest.
	left := q.wrN
	for len(bufs) > 0 && left >= len(bufs[0]) {
		left -= len(bufs[0])
		bufs = bufs[1:]
	}
	bufs[0] = bufs[0][left:]
	return q.writeBlocking(bufs, q.ctx.timeout)
}

// writeBlocking writes bufs, waiting for the peer to take them as long as
// it takes some within bound (0: no bound); wrMu held. The entries of bufs
// may be changed.
func (q *qp) writeBlocking(bufs [][]byte, bound time.Duration) error {
	full := 0 // writes in a row that found no room
	for {
		for len(bufs) > 0 && len(bufs[0]) == 0 {
			bufs = bufs[1:]
		}
		if len(bufs) == 0 {
			return nil
		}
		n := 0
		for _, b := range bufs {
			if n == len(q.iov) {
				break
			}
			if len(b) > 0 {
				q.iov[n] = syscall.Iovec{Base: &b[0]}
				q.iov[n].SetLen(len(b))
				n++
			}
		}
		q.iovN, q.wrN = n, 0
		err := q.writev()
		clear(q.iov[:n])
		if err == errAgain {
			// Room usually comes within a few yields (the peer is
			// reading); sleeping in poll(2) costs a hand-off of this
			// thread's processor.
			if full++; full < midFrameSpin {
				runtime.Gosched()
				continue
			}
			full = 0
			var deadline time.Time
			if bound > 0 {
				deadline = time.Now().Add(bound)
			}
			if err := q.pollFD(unix.POLLOUT, deadline); err != nil {
				if errors.Is(err, os.ErrDeadlineExceeded) {
					return q.stallErr("took no data")
				}
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		full = 0
		for left := q.wrN; left > 0; {
			k := min(left, len(bufs[0]))
			bufs[0] = bufs[0][k:]
			left -= k
			if len(bufs[0]) == 0 {
				bufs = bufs[1:]
			}
		}
	}
}

// peer names the other end of the connection in errors.
func (q *qp) peer() string {
	return fmt.Sprintf("peer %s (qp %d, local qp %d)", q.remote.Addr, q.remote.QPN, q.num)
}

// stallErr is the cause recorded when the peer stopped taking or sending
// data for the context's timeout.
func (q *qp) stallErr(what string) error {
	return fmt.Errorf("%w: %s %s for %v (it is stopped, hung or overloaded)", verbs.ErrTimeout, q.peer(), what, q.ctx.timeout)
}

// sendErr is the cause recorded when writing what (requests, responses)
// failed.
func (q *qp) sendErr(what string, err error) error {
	if errors.Is(err, verbs.ErrTimeout) {
		return err
	}
	return fmt.Errorf("%w: sending %s to %s: %w", verbs.ErrTransport, what, q.peer(), err)
}

// lost is the cause recorded when reading the stream failed.
func (q *qp) lost(err error) error {
	switch {
	case errors.Is(err, verbs.ErrTimeout):
		return err
	case errors.Is(err, os.ErrDeadlineExceeded):
		return q.stallErr("sent nothing more in the middle of a frame")
	case errors.Is(err, errFrame):
		return fmt.Errorf("%w: %s sent a malformed frame: %w", verbs.ErrTransport, q.peer(), err)
	}
	return fmt.Errorf("%w: connection to %s lost (its process ended without closing, or the network failed): %w", verbs.ErrTransport, q.peer(), err)
}

// writev is one writev(2) of q.iov[:q.iovN] that never waits, made
// without telling the scheduler, as rawRead is; it records in q.wrN what
// was written, and returns errAgain if the socket had no room. wrMu held.
func (q *qp) writev() error {
	q.fdMu.RLock()
	defer q.fdMu.RUnlock()
	if q.fdClosed {
		return net.ErrClosed
	}
	for {
		k, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, uintptr(q.rx.fd), uintptr(unsafe.Pointer(&q.iov[0])), uintptr(q.iovN))
		switch e {
		case 0:
			q.wrN = int(k)
			return nil
		case syscall.EINTR:
			continue
		case syscall.EAGAIN:
			return errAgain
		}
		return e
	}
}
