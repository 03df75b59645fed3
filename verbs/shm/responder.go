package shm

import (
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"
	"unsafe"

	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/accop"
)

// request sends a request to the peer's responder and waits for its
// response, at most the context's timeout; sendMu held. payload is a
// write's data, dst where a read's lands.
func (q *qp) request(h *msg, payload, dst [][]byte) (response, verbs.Status) {
	q.rdMu.Lock()
	q.rdDst = dst
	q.rdMu.Unlock()
	select { // a stale hand-over from a failure
	case r := <-q.respCh:
		if r.fd >= 0 {
			syscall.Close(r.fd)
		}
	default:
	}
	for _, p := range payload {
		h.len += uint32(len(p))
	}
	h.encode(&q.reqHdr)
	q.reqBuf = append(q.reqBuf[:0], q.reqHdr[:])
	q.reqBuf = append(q.reqBuf, payload...)
	q.wrMu.Lock()
	if q.ctx.timeout > 0 {
		q.conn.SetWriteDeadline(time.Now().Add(q.ctx.timeout))
	}
	q.reqOut = q.reqBuf
	_, err := q.reqOut.WriteTo(q.conn)
	if q.ctx.timeout > 0 {
		q.conn.SetWriteDeadline(time.Time{})
	}
	q.wrMu.Unlock()
	clear(q.reqBuf)
	if err != nil {
		q.fail(verbs.StatusTransport, fmt.Errorf("%w: writing a request to %s: %w", verbs.ErrTransport, q.peer(), err), false)
		return response{}, verbs.StatusTransport
	}
	var timeout <-chan time.Time
	if q.ctx.timeout > 0 {
		// One timer per queue pair, reset for each request (sendMu held):
		// a new one was garbage for every request.
		if q.reqTimer == nil {
			q.reqTimer = time.NewTimer(q.ctx.timeout)
		} else {
			q.reqTimer.Reset(q.ctx.timeout)
		}
		defer q.reqTimer.Stop()
		timeout = q.reqTimer.C
	}
	select {
	case r := <-q.respCh:
		if r.failed {
			return r, verbs.StatusTransport
		}
		return r, verbs.Status(r.h.status)
	case <-q.done:
		return response{}, verbs.StatusTransport
	case <-timeout:
		q.fail(verbs.StatusTransport, fmt.Errorf("%w: %s did not answer a request within %v (it is stopped, hung or overloaded)", verbs.ErrTimeout, q.peer(), q.ctx.timeout), true)
		return response{}, verbs.StatusTransport
	}
}

// sockAccess runs a write, read or atomic through the owner's responder.
func (q *qp) sockAccess(kind uint8, key uint32, addr, n uint64, segs [][]byte, arg0, arg1 uint64) (verbs.Status, uint64) {
	h := msg{kind: kind, addr: addr, rkey: key, arg0: arg0, arg1: arg1}
	var payload, dst [][]byte
	switch kind {
	case mWrite:
		payload = segs
	case mRead:
		dst = segs
		h.arg2 = n
	}
	r, st := q.request(&h, payload, dst)
	return st, r.h.arg0
}

func parseFDs(oob []byte) []int {
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var fds []int
	for i := range msgs {
		if f, err := syscall.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, f...)
		}
	}
	return fds
}

// serveLoop is the connection's reader goroutine: it answers the peer's
// requests (the responder) and hands responses to this side's poster. It
// ends when the socket does: after goodbye, the peer left in order;
// otherwise it exited or was killed.
func (q *qp) serveLoop(conn *net.UnixConn) {
	defer q.serve.Done()
	var b, out [hdrLen]byte
	hr, err := newHdrReader(conn)
	if err != nil {
		q.fail(verbs.StatusTransport, fmt.Errorf("%w: %s: %v", verbs.ErrTransport, q.peer(), err), false)
		return
	}
	for {
		fd, err := hr.read(&b)
		if err != nil {
			q.fail(verbs.StatusTransport, fmt.Errorf("%w: %s exited or was killed (its socket ended without goodbye: %v)", verbs.ErrTransport, q.peer(), err), false)
			return
		}
		var h msg
		h.decode(&b)
		switch h.kind {
		case mResp:
			if h.len > 0 {
				q.rdMu.Lock()
				err := readInto(conn, q.rdDst, int(h.len))
				q.rdMu.Unlock()
				if err != nil {
					q.fail(verbs.StatusTransport, fmt.Errorf("%w: %s exited or was killed while answering: %v", verbs.ErrTransport, q.peer(), err), false)
					return
				}
			}
			select {
			case q.respCh <- response{h: h, fd: fd}:
			default:
				if fd >= 0 {
					syscall.Close(fd)
				}
			}
			continue
		case mGoodbye:
			if h.status == 0 {
				q.fail(verbs.StatusTransport, fmt.Errorf("%w: %s closed its queue pair (its program called Close or ended)", verbs.ErrPeerClosed, q.peer()), false)
			} else {
				q.fail(verbs.StatusTransport, fmt.Errorf("%w: %s's queue pair failed (%v)", verbs.ErrTransport, q.peer(), verbs.Status(h.status&0x7f)), false)
			}
			return
		}
		if fd >= 0 {
			syscall.Close(fd)
		}
		if err := q.respond(conn, &h, &out); err != nil {
			q.fail(verbs.StatusTransport, fmt.Errorf("%w: %s: %v", verbs.ErrTransport, q.peer(), err), false)
			return
		}
	}
}

// readInto reads n bytes into dst's segments (what does not fit is dropped).
func readInto(conn *net.UnixConn, dst [][]byte, n int) error {
	for _, d := range dst {
		k := min(len(d), n)
		if _, err := io.ReadFull(conn, d[:k]); err != nil {
			return err
		}
		n -= k
	}
	if n > 0 {
		_, err := io.CopyN(io.Discard, conn, int64(n))
		return err
	}
	return nil
}

// respond executes one of the peer's requests on this side's memory, with
// the checks of the shared table, and answers it.
func (q *qp) respond(conn *net.UnixConn, h *msg, out *[hdrLen]byte) error {
	c := q.ctx
	acquire() // the poster's release, across the socket
	resp := msg{kind: mResp}
	var rights []byte
	var data []byte
	var e *entry
	switch h.kind {
	case mGetFD:
		r := c.lookup(h.rkey)
		ok := false
		if r != nil {
			// Counted in, so that Dereg keeps the descriptor open until
			// it is sent.
			e, ok = c.table.check(h.rkey, r.addr, 0, 0)
		}
		switch {
		case !ok || r.pd != q.pd:
			resp.status = uint8(verbs.StatusRemoteAccess)
		case r.fd < 0:
			resp.arg0, resp.arg1, resp.arg2 = ^uint64(0), r.addr, r.length
		default:
			resp.arg0, resp.arg1, resp.arg2 = uint64(r.off), r.addr, r.length
			rights = syscall.UnixRights(r.fd)
		}
	case mFAA, mCAS:
		var ok bool
		e, ok = c.table.check(h.rkey, h.addr, 8, verbs.AccessRemoteAtomic)
		r := c.lookup(h.rkey)
		if !ok || r == nil || r.pd != q.pd || h.addr%8 != 0 {
			resp.status = uint8(verbs.StatusRemoteAccess)
			break
		}
		w := (*uint64)(unsafe.Add(r.base, h.addr-r.addr))
		if h.kind == mFAA {
			resp.arg0 = accop.FetchAdd(w, h.arg0)
		} else {
			resp.arg0 = accop.CompareSwap(w, h.arg0, h.arg1)
		}
	case mWrite:
		var ok bool
		e, ok = c.table.check(h.rkey, h.addr, uint64(h.len), verbs.AccessRemoteWrite)
		r := c.lookup(h.rkey)
		if !ok || r == nil || r.pd != q.pd {
			resp.status = uint8(verbs.StatusRemoteAccess)
			if _, err := io.CopyN(io.Discard, conn, int64(h.len)); err != nil {
				return err
			}
			break
		}
		dst := unsafe.Slice((*byte)(unsafe.Add(r.base, h.addr-r.addr)), h.len)
		release()
		if _, err := io.ReadFull(conn, dst); err != nil {
			e.done()
			return err
		}
	case mRead:
		var ok bool
		e, ok = c.table.check(h.rkey, h.addr, h.arg2, verbs.AccessRemoteRead)
		r := c.lookup(h.rkey)
		if !ok || r == nil || r.pd != q.pd {
			resp.status = uint8(verbs.StatusRemoteAccess)
			break
		}
		data = unsafe.Slice((*byte)(unsafe.Add(r.base, h.addr-r.addr)), h.arg2)
		resp.len = uint32(h.arg2)
		release()
	case mAcc:
		var err error
		if data, e, err = q.respondAcc(conn, h, &resp); err != nil {
			return err
		}
		resp.len = uint32(len(data))
		if len(data) == 0 {
			data = nil
		}
	default:
		return errors.New("unknown message kind")
	}
	if e != nil && resp.status != 0 {
		e.done()
		e = nil
	}
	resp.encode(out)
	release()
	q.wrMu.Lock()
	var err error
	if rights != nil {
		_, _, err = conn.WriteMsgUnix(out[:], rights, nil)
	} else if data != nil {
		bufs := net.Buffers{out[:], data}
		_, err = bufs.WriteTo(conn)
	} else {
		_, err = conn.Write(out[:])
	}
	q.wrMu.Unlock()
	if e != nil {
		e.done()
	}
	return err
}
