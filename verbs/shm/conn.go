package shm

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
	"time"

	"github.com/rmago/rmago/internal/auth"
	"github.com/rmago/rmago/internal/memfd"
	"github.com/rmago/rmago/verbs"
)

// Connections. A dialer connects to the peer context's abstract unix
// socket and proves it knows the job's secret (internal/auth, role
// authRole); the kernel vouches for its user and pid (SO_PEERCRED), and a
// peer of another user is refused. The authenticated payload names the
// target queue pair (0: on demand, verbs.ConnManager), the dialer's queue
// pair and pid, and the private data.
//
// Then each side sends a 32-byte setup with three memfds (SCM_RIGHTS): its
// context's region table, its queue pair's inbox, and its receive CQ's
// bell; the acceptor first (or a refusal: ok 0 and a reason), then the
// dialer. Each maps the other's and the socket is left to the reader
// goroutines (responder.go).
//
//	setup: ok(4) qpn-or-reason(4) pid(4) inbox slots(4) reserved(16)
const authRole = "rmago-shm-qp"

const setupLen = 32

// Refusal reasons, in a refused setup's second word.
const (
	refusePlain   = 1
	refuseCrossed = 2 // verbs.ErrCrossed
	refuseClosed  = 3 // verbs.ErrPeerClosed
)

// ConnectTimeout bounds each step of connecting.
var ConnectTimeout = 60 * time.Second

func connectTimeout(c *device) time.Duration {
	if c.timeout > 0 && c.timeout < ConnectTimeout {
		return c.timeout
	}
	return ConnectTimeout
}

type acceptedConn struct {
	conn      *net.UnixConn
	dialerQPN uint32
	pid       int
	private   uint64
}

type setup struct {
	ok, arg, pid, slots uint32
}

// acceptLoop authenticates incoming connections and hands each to the
// queue pair it names, or to the acceptor.
func (c *device) acceptLoop() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.AcceptUnix()
		if err != nil {
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			uid, pid, err := peerCred(conn)
			if err != nil || uid != os.Getuid() {
				conn.Close()
				return
			}
			payload, err := auth.Accept(conn, c.secret, authRole)
			if err != nil {
				conn.Close()
				return
			}
			target := binary.LittleEndian.Uint32(payload[0:])
			ac := acceptedConn{conn: conn, dialerQPN: binary.LittleEndian.Uint32(payload[4:]), pid: pid,
				private: binary.LittleEndian.Uint64(payload[12:])}
			if target == 0 {
				c.onDemand(ac)
				return
			}
			c.mu.Lock()
			q := c.qps[target]
			c.mu.Unlock()
			if q == nil {
				conn.Close()
				return
			}
			select {
			case q.connCh <- ac:
			default:
				conn.Close()
			}
		}()
	}
}

// writeSetup sends s, with this side's three memfds when s.ok.
func (q *qp) writeSetup(conn *net.UnixConn, s setup) error {
	var b [setupLen]byte
	binary.LittleEndian.PutUint32(b[0:], s.ok)
	binary.LittleEndian.PutUint32(b[4:], s.arg)
	binary.LittleEndian.PutUint32(b[8:], s.pid)
	binary.LittleEndian.PutUint32(b[12:], s.slots)
	var rights []byte
	if s.ok == 1 {
		rights = syscall.UnixRights(q.ctx.tabMem.FD(), q.in.mem.FD(), q.recvCQ.bell.mem.FD())
	}
	conn.SetWriteDeadline(time.Now().Add(connectTimeout(q.ctx)))
	_, _, err := conn.WriteMsgUnix(b[:], rights, nil)
	conn.SetWriteDeadline(time.Time{})
	return err
}

// readSetup reads the peer's setup and its descriptors.
func readSetup(conn *net.UnixConn, bound time.Duration) (setup, []int, error) {
	var b [setupLen]byte
	oob := make([]byte, syscall.CmsgSpace(3*4))
	var fds []int
	conn.SetReadDeadline(time.Now().Add(bound))
	defer conn.SetReadDeadline(time.Time{})
	got := 0
	for got < setupLen {
		n, oobn, _, _, err := conn.ReadMsgUnix(b[got:], oob)
		if oobn > 0 {
			fds = append(fds, parseFDs(oob[:oobn])...)
		}
		if err == nil && n == 0 {
			err = errors.New("connection closed")
		}
		if err != nil {
			closeFDs(fds)
			return setup{}, nil, err
		}
		got += n
	}
	s := setup{binary.LittleEndian.Uint32(b[0:]), binary.LittleEndian.Uint32(b[4:]), binary.LittleEndian.Uint32(b[8:]), binary.LittleEndian.Uint32(b[12:])}
	if s.ok == 1 && (len(fds) != 3 || s.slots == 0 || s.slots&(s.slots-1) != 0 || s.slots > 1<<16) {
		closeFDs(fds)
		return setup{}, nil, fmt.Errorf("bad setup (%d descriptors, %d slots)", len(fds), s.slots)
	}
	return s, fds, nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		syscall.Close(fd)
	}
}

// attach maps the peer's table, inbox and bell (fds, closed here) and
// makes q ready to send over conn.
func (q *qp) attach(conn *net.UnixConn, s setup, fds []int, peerName string) error {
	defer closeFDs(fds)
	tab, err := memfd.Map(fds[0], 0, tableBytes)
	if err != nil {
		conn.Close()
		return err
	}
	inMp, err := memfd.Map(fds[1], 0, inboxBytes(int(s.slots)))
	if err != nil {
		tab.Unmap()
		conn.Close()
		return err
	}
	bellMp, err := memfd.Map(fds[2], 0, bellBytes)
	if err != nil {
		tab.Unmap()
		inMp.Unmap()
		conn.Close()
		return err
	}
	in := inboxAt(inMp.Base(), int(s.slots))
	in.mp = inMp
	b := bellAt(bellMp.Base())
	b.mp = bellMp
	q.sendMu.Lock()
	q.mu.Lock()
	if q.state != stInit {
		q.mu.Unlock()
		q.sendMu.Unlock()
		tab.Unmap()
		in.free()
		b.free()
		conn.Close()
		return fmt.Errorf("%w: closed while connecting", verbs.ErrQPState)
	}
	q.peerTab, q.peerTabMp, q.peerIn, q.peerBell = tableAt(tab.Base()), tab, in, b
	q.peerPid, q.peerQPN, q.peerName = int(s.pid), s.arg, peerName
	q.conn = conn
	q.state = stRTS
	q.st.Store(stRTS)
	q.serve.Add(1)
	q.mu.Unlock()
	q.sendMu.Unlock()
	go q.serveLoop(conn)
	close(q.ready)
	return nil
}

// dialSocket connects to the context at addr, authenticates, and reads the
// acceptor's setup.
func (q *qp) dialSocket(addr string, target uint32, private uint64) (*net.UnixConn, setupFDs, error) {
	bound := connectTimeout(q.ctx)
	d := net.Dialer{Timeout: bound}
	nc, err := d.Dial("unix", addr)
	if err != nil {
		return nil, setupFDs{}, fmt.Errorf("%w: shm: connect to %s: %w", verbs.ErrTransport, addr, err)
	}
	conn := nc.(*net.UnixConn)
	uid, pid, err := peerCred(conn)
	if err != nil || uid != os.Getuid() {
		conn.Close()
		return nil, setupFDs{}, fmt.Errorf("%w: %s belongs to another user (uid %d) or its credentials are unknown (%v)", verbs.ErrAuth, addr, uid, err)
	}
	var payload [auth.PayloadLen]byte
	binary.LittleEndian.PutUint32(payload[0:], target)
	binary.LittleEndian.PutUint32(payload[4:], q.num)
	binary.LittleEndian.PutUint32(payload[8:], uint32(q.ctx.pid))
	binary.LittleEndian.PutUint64(payload[12:], private)
	if err := auth.Dial(conn, q.ctx.secret, authRole, payload); err != nil {
		conn.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, setupFDs{}, fmt.Errorf("%w: %s did not answer the connection request within %v", verbs.ErrTimeout, addr, auth.Timeout)
		}
		return nil, setupFDs{}, fmt.Errorf("%w: %s: %w", verbs.ErrAuth, addr, err)
	}
	s, fds, err := readSetup(conn, bound)
	if err != nil {
		conn.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, setupFDs{}, fmt.Errorf("%w: %s did not answer the connection request within %v", verbs.ErrTimeout, addr, bound)
		}
		return nil, setupFDs{}, fmt.Errorf("%w: shm: %s refused the connection request: %w", verbs.ErrTransport, addr, err)
	}
	if s.ok == 1 && int(s.pid) != pid {
		conn.Close()
		closeFDs(fds)
		return nil, setupFDs{}, fmt.Errorf("%w: %s says it is pid %d, the kernel says %d", verbs.ErrAuth, addr, s.pid, pid)
	}
	if s.ok != 1 {
		conn.Close()
		switch s.arg {
		case refuseCrossed:
			return nil, setupFDs{}, errCrossedReply
		case refuseClosed:
			return nil, setupFDs{}, fmt.Errorf("%w: %s refused the connection: it is leaving the job", verbs.ErrPeerClosed, addr)
		}
		return nil, setupFDs{}, fmt.Errorf("shm: %s refused the connection request", addr)
	}
	return conn, setupFDs{s, fds}, nil
}

type setupFDs struct {
	s   setup
	fds []int
}

// finishDial sends the dialer's setup and attaches.
func (q *qp) finishDial(conn *net.UnixConn, sf setupFDs, addr string) error {
	if err := q.writeSetup(conn, setup{ok: 1, arg: q.num, pid: uint32(q.ctx.pid), slots: uint32(inboxSlots(max(q.maxRecv, 1)))}); err != nil {
		conn.Close()
		closeFDs(sf.fds)
		return fmt.Errorf("%w: shm: connecting to %s: %w", verbs.ErrTransport, addr, err)
	}
	return q.attach(conn, sf.s, sf.fds, addr)
}

// acceptSocket answers an authenticated connection for q: its setup, then
// the dialer's.
func (q *qp) acceptSocket(ac acceptedConn) error {
	if err := q.writeSetup(ac.conn, setup{ok: 1, arg: q.num, pid: uint32(q.ctx.pid), slots: uint32(inboxSlots(max(q.maxRecv, 1)))}); err != nil {
		ac.conn.Close()
		return fmt.Errorf("%w: shm: answering pid %d: %w", verbs.ErrTransport, ac.pid, err)
	}
	s, fds, err := readSetup(ac.conn, connectTimeout(q.ctx))
	if err != nil {
		ac.conn.Close()
		return fmt.Errorf("%w: shm: pid %d did not complete the connection: %w", verbs.ErrTransport, ac.pid, err)
	}
	if s.ok != 1 || int(s.pid) != ac.pid {
		ac.conn.Close()
		closeFDs(fds)
		return fmt.Errorf("%w: shm: pid %d sent a bad setup", verbs.ErrTransport, ac.pid)
	}
	return q.attach(ac.conn, s, fds, fmt.Sprintf("pid %d", ac.pid))
}

// ListenEndpoint is the endpoint peers Dial (verbs.ConnManager).
func (c *device) ListenEndpoint() verbs.Endpoint {
	return verbs.Endpoint{Addr: c.name, Device: "shm0", MTU: deviceAttr().MTU}
}

// Accept installs the acceptor of on-demand requests (verbs.ConnManager).
func (c *device) Accept(fn func(verbs.ConnRequest)) {
	c.mu.Lock()
	c.acceptFn = fn
	c.mu.Unlock()
}

func (c *device) onDemand(ac acceptedConn) {
	req := &connRequest{c: c, ac: ac}
	c.mu.Lock()
	fn, closed := c.acceptFn, c.closed
	c.mu.Unlock()
	switch {
	case closed:
		req.Refuse(verbs.ErrPeerClosed)
	case fn == nil:
		req.Refuse(nil)
	default:
		fn(req)
		if !req.answered {
			req.Refuse(nil)
		}
	}
}

// connRequest is an on-demand request waiting for the acceptor's answer.
type connRequest struct {
	c        *device
	ac       acceptedConn
	answered bool
}

func (r *connRequest) Private() uint64 { return r.ac.private }

func (r *connRequest) Refuse(err error) {
	if r.answered {
		return
	}
	r.answered = true
	why := uint32(refusePlain)
	switch {
	case errors.Is(err, verbs.ErrCrossed):
		why = refuseCrossed
	case errors.Is(err, verbs.ErrPeerClosed):
		why = refuseClosed
	}
	var b [setupLen]byte
	binary.LittleEndian.PutUint32(b[4:], why)
	r.ac.conn.SetWriteDeadline(time.Now().Add(connectTimeout(r.c)))
	r.ac.conn.Write(b[:])
	r.ac.conn.Close()
}

func (r *connRequest) Accept(qv verbs.QP) error {
	if r.answered {
		return fmt.Errorf("%w: connection request answered twice", verbs.ErrInvalid)
	}
	q, ok := qv.(*qp)
	if !ok || q.ctx != r.c {
		r.Refuse(nil)
		return fmt.Errorf("%w: the queue pair must come from the same shm context", verbs.ErrInvalid)
	}
	r.answered = true
	q.connMu.Lock()
	defer q.connMu.Unlock()
	q.mu.Lock()
	st := q.state
	q.mu.Unlock()
	if st != stInit {
		r.ac.conn.Close()
		return fmt.Errorf("%w: accepting a connection on a queue pair that is not new", verbs.ErrQPState)
	}
	// When q is dialing the requester and lost the crossing, its Dial
	// returns once this connects it (q.ready).
	return q.acceptSocket(r.ac)
}

var errCrossedReply = errors.New("shm: crossed")

// Dial connects q on demand (verbs.ConnManager).
func (c *device) Dial(qv verbs.QP, remote verbs.Endpoint, private uint64) error {
	q, ok := qv.(*qp)
	if !ok || q.ctx != c {
		return fmt.Errorf("%w: the queue pair must come from this shm context", verbs.ErrInvalid)
	}
	q.connMu.Lock()
	q.mu.Lock()
	st := q.state
	q.mu.Unlock()
	if st == stRTS && !q.dialing {
		q.connMu.Unlock()
		return nil // the peer's crossing request connected it first
	}
	if st != stInit || q.dialing {
		q.connMu.Unlock()
		return fmt.Errorf("%w: dial on a queue pair that is not new", verbs.ErrQPState)
	}
	q.dialing = true
	q.connMu.Unlock()
	conn, sf, err := q.dialSocket(remote.Addr, 0, private)
	if errors.Is(err, errCrossedReply) {
		bound := connectTimeout(c)
		timer := time.NewTimer(bound)
		defer timer.Stop()
		select {
		case <-q.ready:
			return nil
		case <-q.done:
			return fmt.Errorf("%w: closed while connecting", verbs.ErrQPState)
		case <-timer.C:
			return fmt.Errorf("%w: %s refused this side's connection for its own, which did not come within %v", verbs.ErrTimeout, remote.Addr, bound)
		}
	}
	if err != nil {
		return err
	}
	q.connMu.Lock()
	defer q.connMu.Unlock()
	if err := q.finishDial(conn, sf, remote.Addr); err != nil {
		select {
		case <-q.ready: // connected by the peer's request after all
			return nil
		default:
		}
		return err
	}
	return nil
}
