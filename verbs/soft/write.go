package soft

import (
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// Writes to a connection, and the errors of a connection that fails.
//
// A peer that stopped reading (a stopped or hung process) must not block a
// writer for ever: a poster would hold its queue pair's locks, the writer
// goroutine would hold the regions of the read responses it sends, and
// deregistering them would wait too. Every write is therefore bounded by
// the context's timeout. Setting a deadline costs a call into the runtime's
// timers, so a write first goes out with one non-blocking writev, which is
// all it takes while the socket has room; only the rest of a write that
// would block is written with a deadline.

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
	err := q.rx.rc.Write(q.writeFn)
	clear(q.iov[:n])
	if err != nil {
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
	return q.writeBlocking(bufs)
}

// writeBlocking writes bufs, waiting for the peer to take them for at most
// the context's timeout; wrMu held.
func (q *qp) writeBlocking(bufs [][]byte) error {
	if t := q.ctx.timeout; t > 0 {
		q.conn.SetWriteDeadline(time.Now().Add(t))
		// The next write starts without a deadline: a non-blocking write
		// through the raw connection would fail on an expired one.
		defer q.conn.SetWriteDeadline(time.Time{})
	}
	q.wnb = bufs
	_, err := q.wnb.WriteTo(q.conn)
	q.wnb = nil
	if errors.Is(err, os.ErrDeadlineExceeded) {
		return q.stallErr("took no data")
	}
	return err
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

// writevOnce is writeNow's function for rc.Write: one writev(2) that never
// waits (it returns true whatever happened, and records what was written),
// made without telling the scheduler, as rawRead is.
func (q *qp) writevOnce(fd uintptr) bool {
	for {
		k, _, e := syscall.RawSyscall(syscall.SYS_WRITEV, fd, uintptr(unsafe.Pointer(&q.iov[0])), uintptr(q.iovN))
		if e == syscall.EINTR {
			continue
		}
		if e == 0 {
			q.wrN = int(k)
		}
		return true
	}
}
