package transport

import (
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	json "github.com/goccy/go-json"

	"github.com/rmago/rmago/internal/auth"
	"github.com/rmago/rmago/internal/launch"
)

// Bootstrap is the out-of-band channel a job uses once, at start-up, to
// learn its rank and size and to exchange the endpoint information that
// connects the fabric. rmarun's environment is one source; Slurm's srun or
// a PMI server would be others, added beside it without touching the
// fabric or the layers above.
type Bootstrap interface {
	Rank() int
	Size() int
	// Secret is the job's shared key, used to authenticate the fabric.
	Secret() []byte
	// Addr is the IP address this rank's fabric should listen on.
	Addr() string
	// Allgather sends mine to every rank and returns every rank's
	// contribution, indexed by rank. It is collective.
	Allgather(mine []byte) ([][]byte, error)
	// Close releases the channel.
	Close() error
}

// ErrBootstrap means the job's start-up exchange failed: missing or bad
// environment, unreachable rendezvous, or a peer that failed authentication.
var ErrBootstrap = errors.New("transport: bootstrap failed")

// BootstrapTimeout bounds the start-up exchange.
var BootstrapTimeout = 60 * time.Second

// RendezvousConfig describes a TCP rendezvous hosted by rank 0.
type RendezvousConfig struct {
	Rank, Size int
	Rendezvous string // host:port rank 0 listens on
	Secret     []byte
	Addr       string // IP this rank's fabric listens on
}

// BootstrapFromEnv reads the environment rmarun sets (RMAGO_RANK,
// RMAGO_SIZE, RMAGO_RENDEZVOUS, RMAGO_SECRET, RMAGO_ADDR). A program started
// without rmarun runs as a single rank.
func BootstrapFromEnv() (Bootstrap, error) {
	if os.Getenv(launch.EnvRank) == "" && os.Getenv(launch.EnvSize) == "" {
		secret := make([]byte, 32)
		copy(secret, "rmago single-rank job")
		return Rendezvous(RendezvousConfig{Rank: 0, Size: 1, Secret: secret, Addr: launch.DefaultAddr})
	}
	rank, err1 := strconv.Atoi(os.Getenv(launch.EnvRank))
	size, err2 := strconv.Atoi(os.Getenv(launch.EnvSize))
	secret, err3 := hex.DecodeString(os.Getenv(launch.EnvSecret))
	if err := errors.Join(err1, err2, err3); err != nil {
		return nil, fmt.Errorf("%w: bad environment (%s, %s, %s): %v", ErrBootstrap, launch.EnvRank, launch.EnvSize, launch.EnvSecret, err)
	}
	addr := os.Getenv(launch.EnvAddr)
	if addr == "" {
		addr = launch.DefaultAddr
	}
	return Rendezvous(RendezvousConfig{Rank: rank, Size: size, Rendezvous: os.Getenv(launch.EnvRendezvous), Secret: secret, Addr: addr})
}

// Rendezvous starts the TCP rendezvous: rank 0 listens on cfg.Rendezvous
// and the others dial it (retrying until rank 0 is up), each connection
// authenticated with the job secret.
func Rendezvous(cfg RendezvousConfig) (Bootstrap, error) {
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("%w: rank %d of size %d", ErrBootstrap, cfg.Rank, cfg.Size)
	}
	if len(cfg.Secret) < 16 {
		return nil, fmt.Errorf("%w: the job secret must have at least 16 bytes", ErrBootstrap)
	}
	if cfg.Size > 1 && cfg.Rendezvous == "" {
		return nil, fmt.Errorf("%w: no rendezvous address (%s)", ErrBootstrap, launch.EnvRendezvous)
	}
	b := &rendezvous{cfg: cfg}
	deadline := time.Now().Add(BootstrapTimeout)
	if cfg.Size == 1 {
		return b, nil
	}
	if cfg.Rank == 0 {
		ln, err := net.Listen("tcp", cfg.Rendezvous)
		if err != nil {
			return nil, fmt.Errorf("%w: rank 0 listening on %s: %v", ErrBootstrap, cfg.Rendezvous, err)
		}
		defer ln.Close()
		b.peers = make([]net.Conn, cfg.Size)
		for got := 1; got < cfg.Size; {
			ln.(*net.TCPListener).SetDeadline(deadline)
			conn, err := ln.Accept()
			if err != nil {
				b.Close()
				return nil, fmt.Errorf("%w: waiting for %d more ranks: %v", ErrBootstrap, cfg.Size-got, err)
			}
			payload, err := auth.Accept(conn, cfg.Secret, authRole)
			if err != nil {
				conn.Close() // not one of ours
				continue
			}
			r := int(binary.LittleEndian.Uint32(payload[:]))
			if r <= 0 || r >= cfg.Size || b.peers[r] != nil {
				conn.Close()
				continue
			}
			b.peers[r] = conn
			got++
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
			if errors.Is(err, auth.ErrAuth) && !errors.Is(err, io.EOF) {
				return nil, fmt.Errorf("%w: %v", ErrBootstrap, err)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: rank 0 at %s unreachable: %v", ErrBootstrap, cfg.Rendezvous, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
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
