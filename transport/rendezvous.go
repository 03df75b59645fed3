package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"time"

	json "github.com/goccy/go-json"

	"github.com/rmago/rmago/internal/auth"
	"github.com/rmago/rmago/internal/launch"
)

// RendezvousConfig describes a TCP rendezvous hosted by rank 0.
type RendezvousConfig struct {
	Rank, Size int
	Rendezvous string // host:port rank 0 listens on
	Secret     []byte
	Addr       string // IP this rank's fabric listens on
	// Listener, on rank 0, is an already open listener to use instead of
	// listening on Rendezvous; it is left open.
	Listener *net.TCPListener
	// Nodes, if known, is the node identity of every rank (see Topology).
	Nodes []string
}

// Rendezvous starts the TCP rendezvous: rank 0 listens on cfg.Rendezvous
// and the others dial it (retrying until rank 0 is up), each connection
// authenticated with the job secret. Rank 0 authenticates connections
// concurrently, each within auth.Timeout: a connection that stays silent,
// speaks something else or fails the proof is dropped and never fails the
// job, which only fails if the real ranks do not all arrive in time.
func Rendezvous(cfg RendezvousConfig) (Bootstrap, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%w: rank %d of size %d", ErrBootstrap, cfg.Rank, cfg.Size)
	}
	if len(cfg.Secret) < 16 {
		return nil, fmt.Errorf("%w: the job secret must have at least 16 bytes", ErrBootstrap)
	}
	if cfg.Size > 1 && cfg.Rendezvous == "" && (cfg.Rank != 0 || cfg.Listener == nil) {
		return nil, fmt.Errorf("%w: no rendezvous address (%s)", ErrBootstrap, launch.EnvRendezvous)
	}
	if cfg.Nodes != nil && len(cfg.Nodes) != cfg.Size {
		return nil, fmt.Errorf("%w: %d node identities for %d ranks", ErrBootstrap, len(cfg.Nodes), cfg.Size)
	}
	b := &rendezvous{cfg: cfg}
	deadline := time.Now().Add(BootstrapTimeout)
	if cfg.Size == 1 {
		return b, nil
	}
	if cfg.Rank == 0 {
		ln := cfg.Listener
		if ln == nil {
			l, err := net.Listen("tcp", cfg.Rendezvous)
			if err != nil {
				return nil, fmt.Errorf("%w: rank 0 listening on %s: %v", ErrBootstrap, cfg.Rendezvous, err)
			}
			ln = l.(*net.TCPListener)
			defer ln.Close()
		}
		if err := b.acceptAll(ln, deadline); err != nil {
			b.Close()
			return nil, err
		}
		return b, nil
	}
	var payload [auth.PayloadLen]byte
	binary.LittleEndian.PutUint32(payload[:], uint32(cfg.Rank))
	for {
		conn, err := net.DialTimeout("tcp", cfg.Rendezvous, time.Second)
		if err == nil {
			if err = auth.Dial(conn, cfg.Secret, authRole, payload); err == nil {
				b.root = conn
				return b, nil
			}
			conn.Close()
			if !retryable(err) {
				return nil, fmt.Errorf("%w: rank %d at rank 0's rendezvous %s: %v", ErrBootstrap, cfg.Rank, cfg.Rendezvous, err)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: rank %d: rank 0 at %s unreachable: %v", ErrBootstrap, cfg.Rank, cfg.Rendezvous, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// retryable reports whether a failed handshake with rank 0 may succeed
// later: rank 0 closed or did not answer (it is not accepting yet, or
// dropped the connection among others), as opposed to a proof that is wrong.
func retryable(err error) bool {
	var ne net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) ||
		(errors.As(err, &ne) && ne.Timeout())
}

// acceptAll is rank 0's side: it accepts connections until every other
// rank has arrived, authenticating each in its own goroutine.
func (b *rendezvous) acceptAll(ln *net.TCPListener, deadline time.Time) error {
	size := b.cfg.Size
	type arrival struct {
		rank int
		conn net.Conn
	}
	arrivals := make(chan arrival)
	stop := make(chan struct{})
	acceptDone := make(chan error, 1)
	var dropped atomic.Int64
	ln.SetDeadline(deadline)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				acceptDone <- err
				return
			}
			go func() {
				// auth.Accept bounds the handshake by auth.Timeout.
				payload, err := auth.Accept(conn, b.cfg.Secret, authRole)
				if err != nil {
					conn.Close() // not one of ours, or silent
					dropped.Add(1)
					return
				}
				select {
				case arrivals <- arrival{int(binary.LittleEndian.Uint32(payload[:])), conn}:
				case <-stop:
					conn.Close()
				}
			}()
		}
	}()
	b.peers = make([]net.Conn, size)
	var err error
	for got := 1; got < size && err == nil; {
		select {
		case a := <-arrivals:
			if a.rank <= 0 || a.rank >= size || b.peers[a.rank] != nil {
				a.conn.Close()
				dropped.Add(1)
				continue
			}
			b.peers[a.rank] = a.conn
			got++
		case aerr := <-acceptDone:
			var missing []int
			for r := 1; r < size; r++ {
				if b.peers[r] == nil {
					missing = append(missing, r)
				}
			}
			err = fmt.Errorf("%w: rank 0 waiting at %s for ranks %v: %v (%d other connections dropped: silent, not rmago, or wrong secret)",
				ErrBootstrap, ln.Addr(), missing, aerr, dropped.Load())
			acceptDone <- aerr // for the wait below
		}
	}
	close(stop)
	// Stop the accepting goroutine, leaving the listener open for the
	// caller when it is the caller's.
	ln.SetDeadline(time.Now())
	<-acceptDone
	ln.SetDeadline(time.Time{})
	return err
}

const authRole = "rmago-bootstrap"

type rendezvous struct {
	cfg   RendezvousConfig
	peers []net.Conn // rank 0: a connection per other rank
	root  net.Conn   // other ranks: the connection to rank 0
}

func (b *rendezvous) Rank() int      { return b.cfg.Rank }
func (b *rendezvous) Size() int      { return b.cfg.Size }
func (b *rendezvous) Secret() []byte { return b.cfg.Secret }
func (b *rendezvous) Addr() string   { return b.cfg.Addr }

// Allgather: every rank sends its bytes to rank 0, which answers each with
// the JSON array of all contributions.
func (b *rendezvous) Allgather(mine []byte) ([][]byte, error) {
	all := make([][]byte, b.cfg.Size)
	all[b.cfg.Rank] = mine
	if b.cfg.Size == 1 {
		return all, nil
	}
	deadline := time.Now().Add(BootstrapTimeout)
	if b.cfg.Rank != 0 {
		b.root.SetDeadline(deadline)
		if err := writeMsg(b.root, mine); err != nil {
			return nil, fmt.Errorf("%w: sending to rank 0: %v", ErrBootstrap, err)
		}
		msg, err := readMsg(b.root)
		if err != nil {
			return nil, fmt.Errorf("%w: receiving from rank 0: %v", ErrBootstrap, err)
		}
		if err := json.Unmarshal(msg, &all); err != nil || len(all) != b.cfg.Size {
			return nil, fmt.Errorf("%w: bad allgather reply: %v", ErrBootstrap, err)
		}
		return all, nil
	}
	for r := 1; r < b.cfg.Size; r++ {
		b.peers[r].SetDeadline(deadline)
		msg, err := readMsg(b.peers[r])
		if err != nil {
			return nil, fmt.Errorf("%w: receiving from rank %d: %v", ErrBootstrap, r, err)
		}
		all[r] = msg
	}
	reply, err := json.Marshal(all)
	if err != nil {
		return nil, err
	}
	for r := 1; r < b.cfg.Size; r++ {
		if err := writeMsg(b.peers[r], reply); err != nil {
			return nil, fmt.Errorf("%w: sending to rank %d: %v", ErrBootstrap, r, err)
		}
	}
	return all, nil
}

func (b *rendezvous) Close() error {
	for _, c := range b.peers {
		if c != nil {
			c.Close()
		}
	}
	if b.root != nil {
		b.root.Close()
	}
	return nil
}

const maxMsg = 64 << 20

func writeMsg(w io.Writer, msg []byte) error {
	var n [4]byte
	binary.LittleEndian.PutUint32(n[:], uint32(len(msg)))
	_, err := (&net.Buffers{n[:], msg}).WriteTo(w)
	return err
}

func readMsg(r io.Reader) ([]byte, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	size := binary.LittleEndian.Uint32(n[:])
	if size > maxMsg {
		return nil, fmt.Errorf("message of %d bytes", size)
	}
	msg := make([]byte, size)
	_, err := io.ReadFull(r, msg)
	return msg, err
}

// Nodes returns the ranks' node identities when the rendezvous was given them.
func (b *rendezvous) Nodes() []string { return b.cfg.Nodes }
