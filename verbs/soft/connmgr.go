package soft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/rmago/rmago/internal/auth"
	"github.com/rmago/rmago/verbs"
)

// On-demand connections (verbs.ConnManager), as the RDMA connection
// manager makes them: a dialer names no queue pair of the peer (target QPN
// 0 in the authenticated payload) but carries private data, and the peer's
// acceptor (installed by the transport) picks or creates the queue pair
// that takes the connection. The acceptor answers with 8 bytes: its queue
// pair's depth and number, or a depth of 0 and a refusal reason.
//
// Payload of an on-demand request: target QPN 0 (0), dialer's QPN (4), its
// send depth (8), private data (12, 8 bytes), the port the dialer's
// context listens on (20, 2 bytes), so that the passive queue pair can name
// its peer by its listening address in errors.

// Refusal reasons, in the reply's second word when its depth is 0.
const (
	refusePlain   = 1
	refuseCrossed = 2 // verbs.ErrCrossed: the acceptor's own request wins
	refuseClosed  = 3 // verbs.ErrPeerClosed: the acceptor is leaving
)

// ListenEndpoint is the endpoint peers Dial (verbs.ConnManager).
func (c *device) ListenEndpoint() verbs.Endpoint {
	return verbs.Endpoint{Addr: c.ln.Addr().String(), Device: "soft0", MTU: deviceAttr().MTU}
}

// Accept installs the acceptor of on-demand requests (verbs.ConnManager).
func (c *device) Accept(fn func(verbs.ConnRequest)) {
	c.mu.Lock()
	c.acceptFn = fn
	c.mu.Unlock()
}

// connectTimeout bounds each step of an on-demand connection: the
// provider's ConnectTimeout, or the context's timeout if shorter.
func (c *device) connectTimeout() time.Duration {
	if c.timeout > 0 && c.timeout < ConnectTimeout {
		return c.timeout
	}
	return ConnectTimeout
}

// onDemand hands an authenticated request that names no queue pair to the
// acceptor.
func (c *device) onDemand(ac acceptedConn, payload *[auth.PayloadLen]byte) {
	req := &connRequest{c: c, ac: ac, private: binary.LittleEndian.Uint64(payload[12:])}
	port := binary.LittleEndian.Uint16(payload[20:])
	host, _, _ := net.SplitHostPort(ac.conn.RemoteAddr().String())
	req.addr = net.JoinHostPort(host, strconv.Itoa(int(port)))
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
	private  uint64
	addr     string // the dialer's listening address
	answered bool
}

func (r *connRequest) Private() uint64 { return r.private }

// reply writes the acceptor's 8-byte answer.
func (r *connRequest) reply(a, b uint32) error {
	var rep [8]byte
	binary.LittleEndian.PutUint32(rep[0:], a)
	binary.LittleEndian.PutUint32(rep[4:], b)
	r.ac.conn.SetWriteDeadline(time.Now().Add(r.c.connectTimeout()))
	_, err := r.ac.conn.Write(rep[:])
	r.ac.conn.SetWriteDeadline(time.Time{})
	return err
}

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
	r.reply(0, why)
	r.ac.conn.Close()
}

func (r *connRequest) Accept(qv verbs.QP) error {
	if r.answered {
		return fmt.Errorf("%w: connection request answered twice", verbs.ErrInvalid)
	}
	q, ok := qv.(*qp)
	if !ok || q.ctx != r.c {
		r.Refuse(nil)
		return fmt.Errorf("%w: the queue pair must come from the same soft context", verbs.ErrInvalid)
	}
	r.answered = true
	conn := r.ac.conn
	q.connMu.Lock()
	defer q.connMu.Unlock()
	q.mu.Lock()
	st := q.state
	q.mu.Unlock()
	if st != stInit {
		conn.Close()
		return fmt.Errorf("%w: accepting a connection on a queue pair that is not new", verbs.ErrQPState)
	}
	if err := r.reply(uint32(q.maxSend), q.num); err != nil {
		conn.Close()
		return fmt.Errorf("soft: answering the connection request of %s: %w", r.addr, err)
	}
	if q.dialing {
		// This side's Dial to the requester lost the crossing: it takes
		// this connection.
		select {
		case q.connCh <- r.ac:
		default:
			conn.Close()
		}
		return nil
	}
	return q.attach(conn, r.ac.peerDepth, verbs.Endpoint{QPN: r.ac.dialerQPN, Addr: r.addr, Device: "soft0", MTU: deviceAttr().MTU})
}

// errCrossedReply is Dial's own request refused because the peer's wins.
var errCrossedReply = errors.New("soft: crossed")

// Dial connects q on demand (verbs.ConnManager).
func (c *device) Dial(qv verbs.QP, remote verbs.Endpoint, private uint64) error {
	q, ok := qv.(*qp)
	if !ok || q.ctx != c {
		return fmt.Errorf("%w: the queue pair must come from this soft context", verbs.ErrInvalid)
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

	conn, depth, qpn, err := q.dialOnDemand(remote, private)
	if errors.Is(err, errCrossedReply) {
		ac, err := q.awaitHandoff(remote)
		if err != nil {
			return err
		}
		return q.attach(ac.conn, ac.peerDepth, verbs.Endpoint{QPN: ac.dialerQPN, Addr: remote.Addr, Device: remote.Device, MTU: remote.MTU})
	}
	if err != nil {
		return err
	}
	remote.QPN = qpn
	if err := q.attach(conn, depth, remote); err != nil {
		return err
	}
	select { // a connection handed over against the protocol: not needed
	case ac := <-q.connCh:
		ac.conn.Close()
	default:
	}
	return nil
}

// dialOnDemand opens and authenticates q's connection to the context at
// remote and reads the acceptor's answer.
func (q *qp) dialOnDemand(remote verbs.Endpoint, private uint64) (net.Conn, int, uint32, error) {
	bound := q.ctx.connectTimeout()
	conn, err := q.ctx.dialTCP(remote.Addr, bound)
	if err != nil {
		return nil, 0, 0, fmt.Errorf("soft: connect to %s: %w", remote.Addr, err)
	}
	var payload [auth.PayloadLen]byte
	binary.LittleEndian.PutUint32(payload[4:], q.num)
	binary.LittleEndian.PutUint32(payload[8:], uint32(q.maxSend))
	binary.LittleEndian.PutUint64(payload[12:], private)
	if _, port, err := net.SplitHostPort(q.ctx.ln.Addr().String()); err == nil {
		p, _ := strconv.Atoi(port)
		binary.LittleEndian.PutUint16(payload[20:], uint16(p))
	}
	if err := auth.Dial(conn, q.ctx.secret, authRole, payload); err != nil {
		conn.Close()
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Its kernel took the connection, its program does not answer.
			return nil, 0, 0, fmt.Errorf("%w: %s did not answer the connection request within %v (is it stopped or hung?)", verbs.ErrTimeout, remote.Addr, auth.Timeout)
		case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
			// Its program ended, or is closing, while answering.
			return nil, 0, 0, fmt.Errorf("%w: %s closed the connection request unanswered: %w", verbs.ErrTransport, remote.Addr, err)
		}
		return nil, 0, 0, fmt.Errorf("%w: %s: %w", verbs.ErrAuth, remote.Addr, err)
	}
	var rep [8]byte
	conn.SetReadDeadline(time.Now().Add(bound))
	if _, err := io.ReadFull(conn, rep[:]); err != nil {
		conn.Close()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, 0, 0, fmt.Errorf("%w: %s did not answer the connection request within %v", verbs.ErrTimeout, remote.Addr, bound)
		}
		return nil, 0, 0, fmt.Errorf("soft: %s refused the connection request: %w", remote.Addr, err)
	}
	conn.SetReadDeadline(time.Time{})
	depth := binary.LittleEndian.Uint32(rep[0:])
	arg := binary.LittleEndian.Uint32(rep[4:])
	if depth == 0 {
		conn.Close()
		switch arg {
		case refuseCrossed:
			return nil, 0, 0, errCrossedReply
		case refuseClosed:
			return nil, 0, 0, fmt.Errorf("%w: %s refused the connection: it is leaving the job", verbs.ErrPeerClosed, remote.Addr)
		}
		return nil, 0, 0, fmt.Errorf("soft: %s refused the connection request", remote.Addr)
	}
	if int(depth) > deviceAttr().MaxQPWR {
		conn.Close()
		return nil, 0, 0, fmt.Errorf("soft: %s answered a queue depth of %d", remote.Addr, depth)
	}
	return conn, int(depth), arg, nil
}

// awaitHandoff waits for the connection of the peer whose request won the
// crossing (handed over by Accept).
func (q *qp) awaitHandoff(remote verbs.Endpoint) (acceptedConn, error) {
	bound := q.ctx.connectTimeout()
	timer := time.NewTimer(bound)
	defer timer.Stop()
	select {
	case ac := <-q.connCh:
		return ac, nil
	case <-q.done:
		return acceptedConn{}, fmt.Errorf("%w: closed while connecting", verbs.ErrQPState)
	case <-timer.C:
		return acceptedConn{}, fmt.Errorf("%w: %s refused this side's connection for its own, which did not come within %v", verbs.ErrTimeout, remote.Addr, bound)
	}
}
