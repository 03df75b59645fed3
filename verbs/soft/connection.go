package soft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/rmago/rmago/internal/auth"
	"github.com/rmago/rmago/verbs"
)

// Connections: each connected queue pair owns one authenticated TCP
// connection to its peer, made by Connect from the endpoints both sides
// exchanged (connmgr.go makes them on demand), and ended in order by the
// goodbye frame.

// ConnectTimeout bounds how long Connect waits for the peer's side.
var ConnectTimeout = 60 * time.Second

const authRole = "rmago-soft-qp"

type acceptedConn struct {
	conn      net.Conn
	dialerQPN uint32
	peerDepth int
}

// dials reports whether this side opens the TCP connection: the side with
// the smaller (address, QPN) does.
func (q *qp) dials(remote verbs.Endpoint) bool {
	me := q.Endpoint()
	if me.Addr != remote.Addr {
		return me.Addr < remote.Addr
	}
	return me.QPN < remote.QPN
}

func (q *qp) Connect(remote verbs.Endpoint) error {
	q.mu.Lock()
	if q.state != stInit || q.rx != nil {
		q.mu.Unlock()
		return fmt.Errorf("%w: connect on a queue pair that is not new", verbs.ErrQPState)
	}
	q.remote = remote
	q.mu.Unlock()
	var (
		conn      net.Conn
		peerDepth int
		err       error
	)
	if q.dials(remote) {
		conn, peerDepth, err = q.dial(remote)
	} else {
		conn, peerDepth, err = q.await(remote)
	}
	if err != nil {
		return err
	}
	return q.attach(conn, peerDepth, remote)
}

// attach makes q ready to send over conn, an authenticated connection to
// the queue pair remote names, whose send queue is peerDepth deep: it
// takes the socket out of Go's network poller (sleeper.go) and starts the
// connection's reader and writer goroutines.
func (q *qp) attach(conn net.Conn, peerDepth int, remote verbs.Endpoint) error {
	if tc, ok := conn.(*net.TCPConn); ok {
		tc.SetNoDelay(true)
	}
	q.mu.Lock()
	if q.state != stInit {
		q.mu.Unlock()
		conn.Close()
		return fmt.Errorf("%w: closed while connecting", verbs.ErrQPState)
	}
	q.remote = remote
	fd, err := detachFD(conn)
	if err != nil {
		q.mu.Unlock()
		return fmt.Errorf("soft: %w", err)
	}
	rx := newRxStream(q, fd)
	q.rx = rx
	q.respCh = make(chan response, peerDepth+q.maxRecv+16)
	q.state = stRTS
	q.mu.Unlock()
	q.sendMu.Lock()
	q.loop = q.loopPeer(remote)
	if q.loop == nil {
		q.cork = make([]byte, corkSize)
		q.corkTimer = time.AfterFunc(time.Hour, q.corkExpired)
		q.corkTimer.Stop()
	}
	q.sendMu.Unlock()
	// Into the epoll set last: the sleeper may run the stream's frames as
	// soon as it is there (even at once, for an event of a closed socket
	// whose descriptor number this one reuses).
	if err := q.ctx.prog.sl.add(rx); err != nil {
		err = fmt.Errorf("soft: %w", err)
		q.fail(verbs.StatusTransport, err)
		return err
	}
	q.finished.Add(2)
	go q.serve()
	go q.writeResponses()
	q.ctx.prog.attach(q)
	return nil
}

func (q *qp) dial(remote verbs.Endpoint) (net.Conn, int, error) {
	conn, err := q.ctx.dialTCP(remote.Addr, ConnectTimeout)
	if err != nil {
		return nil, 0, fmt.Errorf("soft: connect to %s: %w", remote.Addr, err)
	}
	var payload [auth.PayloadLen]byte
	binary.LittleEndian.PutUint32(payload[0:], remote.QPN)
	binary.LittleEndian.PutUint32(payload[4:], q.num)
	binary.LittleEndian.PutUint32(payload[8:], uint32(q.maxSend))
	if err := auth.Dial(conn, q.ctx.secret, authRole, payload); err != nil {
		conn.Close()
		return nil, 0, fmt.Errorf("%w: %v", verbs.ErrAuth, err)
	}
	var depth [4]byte
	conn.SetReadDeadline(time.Now().Add(ConnectTimeout))
	if _, err := io.ReadFull(conn, depth[:]); err != nil {
		conn.Close()
		return nil, 0, fmt.Errorf("soft: peer %s refused queue pair %d: %w", remote.Addr, remote.QPN, err)
	}
	conn.SetReadDeadline(time.Time{})
	return conn, int(binary.LittleEndian.Uint32(depth[:])), nil
}

func (q *qp) await(remote verbs.Endpoint) (net.Conn, int, error) {
	timer := time.NewTimer(ConnectTimeout)
	defer timer.Stop()
	for {
		select {
		case ac := <-q.connCh:
			if ac.dialerQPN != remote.QPN {
				ac.conn.Close()
				continue
			}
			return ac.conn, ac.peerDepth, nil
		case <-q.done:
			return nil, 0, fmt.Errorf("%w: closed while connecting", verbs.ErrQPState)
		case <-timer.C:
			return nil, 0, fmt.Errorf("%w: no connection from %s (qp %d) within %v", verbs.ErrTimeout, remote.Addr, remote.QPN, ConnectTimeout)
		}
	}
}

// acceptLoop authenticates incoming connections and hands each to the
// queue pair it names. Anything that fails authentication is dropped
// before a single request is read.
func (c *device) acceptLoop() {
	defer c.wg.Done()
	for {
		conn, err := c.ln.Accept()
		if err != nil {
			return
		}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			payload, err := auth.Accept(conn, c.secret, authRole)
			if err != nil {
				conn.Close()
				return
			}
			target := binary.LittleEndian.Uint32(payload[0:])
			ac := acceptedConn{conn: conn, dialerQPN: binary.LittleEndian.Uint32(payload[4:]), peerDepth: int(binary.LittleEndian.Uint32(payload[8:]))}
			if ac.peerDepth <= 0 || ac.peerDepth > deviceAttr().MaxQPWR {
				conn.Close()
				return
			}
			if target == 0 {
				c.onDemand(ac, &payload)
				return
			}
			c.mu.Lock()
			q := c.qps[target]
			c.mu.Unlock()
			if q == nil {
				conn.Close()
				return
			}
			// Tell the dialer our depth now, so it need not wait for this
			// program to reach Connect.
			var depth [4]byte
			binary.LittleEndian.PutUint32(depth[:], uint32(q.maxSend))
			if _, err := conn.Write(depth[:]); err != nil {
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

// goodbye handles the peer's orderly close: requests it executed complete,
// later ones fail, and this side closes its end too. The posted receives
// are flushed, as after any failure, so that whoever waits for something
// from the peer learns at once that nothing more will come (the receives
// that took what it sent before have completed already), and the cause
// says the peer closed in order (verbs.ErrPeerClosed).
func (q *qp) goodbye(f *frame) {
	q.mu.Lock()
	for q.pn > 0 && q.pend[q.phead].seq <= f.seq && q.pend[q.phead].nseg == 0 {
		q.completeHead(verbs.StatusSuccess)
	}
	q.mu.Unlock()
	q.fail(verbs.StatusTransport, fmt.Errorf("%w: %s closed its queue pair (its program called Close or ended)", verbs.ErrPeerClosed, q.peer()))
}

// dialTCP connects to addr within bound. A network that cannot reach the
// host for a moment (no route, network unreachable: an ARP entry not yet
// resolved, a link coming back) is tried again, with growing pauses, until
// the bound; any other error, such as a refused connection (nothing
// listens there: the peer is gone), is returned at once. The socket gets
// c's congestion control before it connects.
func (c *device) dialTCP(addr string, bound time.Duration) (net.Conn, error) {
	d := net.Dialer{Control: congestionControl(c.congestion)}
	deadline := time.Now().Add(bound)
	pause := 10 * time.Millisecond
	for {
		left := time.Until(deadline)
		if left <= 0 {
			left = time.Millisecond
		}
		d.Timeout = left
		conn, err := d.Dial("tcp", addr)
		if err == nil || !transientDialErr(err) || time.Now().Add(pause).After(deadline) {
			return conn, err
		}
		time.Sleep(pause)
		pause = min(2*pause, 200*time.Millisecond)
	}
}

// transientDialErr reports whether a failed dial may succeed if tried again.
func transientDialErr(err error) bool {
	return errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH)
}
