package transport

import (
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/internal/pmi"
)

// PMIConfig configures a bootstrap through a PMI process manager.
type PMIConfig struct {
	// Getenv reads the environment (PMI_*, RMAGO_ADDR, RMAGO_NODE, the
	// launchers' hints); nil means os.Getenv.
	Getenv func(string) string
	// Wire is the PMI wire protocol, 1 or 2, or pmi.WirePMIx for libpmix
	// (build tag pmix); 0 means RMAGO_PMI, else 1.
	Wire int
	// Trace, if not nil, receives every PMI message.
	Trace func(string)
}

// BootstrapPMI joins the job of the PMI process manager the environment
// names (PMI_FD, or PMI_PORT with PMI_ID). Through the process manager's
// key-value store, rank 0 publishes the job secret, which it draws from
// crypto/rand, and the address of a TCP rendezvous; every rank publishes
// its node identity and listen address; the fabric's exchange (Allgather)
// goes through the store too. Close finalizes PMI, which allows a process
// one session: a later BootstrapPMI in the same process with the same
// environment joins the same job again through rank 0's rendezvous, which
// stays open for that.
//
// Trust: the secret is as private as the store. A PMI_FD is a socket only
// the process and its launcher hold; Hydra's -pmi-port listens on TCP,
// where another user who learns the port and a PMI id could read it.
func BootstrapPMI(cfg PMIConfig) (Bootstrap, error) {
	// Only the process's own environment names one session for its
	// lifetime; an explicit Getenv (tests) always opens a new one.
	remember := cfg.Getenv == nil
	if remember {
		cfg.Getenv = os.Getenv
	}
	s, err := config.Load(cfg.Getenv)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBootstrap, err)
	}
	if cfg.Wire == 0 {
		cfg.Wire = s.PMI
	}
	key := pmiSessionKey(cfg.Getenv)
	if remember {
		pmiSessions.Lock()
		defer pmiSessions.Unlock()
		if s, ok := pmiSessions.m[key]; ok {
			return Rendezvous(s)
		}
	}
	var c pmi.Client
	if cfg.Wire == pmi.WirePMIx {
		c, err = pmi.OpenPMIx(cfg.Trace)
	} else {
		c, err = pmi.Open(pmi.Config{Getenv: cfg.Getenv, Wire: cfg.Wire, Timeout: BootstrapTimeout, Trace: cfg.Trace})
	}
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBootstrap, wireName(cfg.Wire), err)
	}
	b, err := startPMI(c, cfg.Getenv)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("%w: %s rank %d: %w", ErrBootstrap, wireName(cfg.Wire), c.Rank(), err)
	}
	if remember {
		if pmiSessions.m == nil {
			pmiSessions.m = map[string]RendezvousConfig{}
		}
		pmiSessions.m[key] = b.again
	} else if b.again.Listener != nil {
		b.ownLn = b.again.Listener // closed with the bootstrap
	}
	return b, nil
}

// pmiSessions remembers, per PMI environment, the job a finalized PMI
// session joined.
var pmiSessions struct {
	sync.Mutex
	m map[string]RendezvousConfig
}

func pmiSessionKey(getenv func(string) string) string {
	return getenv(pmi.EnvFD) + "|" + getenv(pmi.EnvPort) + "|" + getenv(pmi.EnvID) + "|" + getenv(pmi.EnvRank) + "|" + getenv("PMIX_RANK")
}

// ownedGetter is a client whose keys belong to the rank that put them (PMIx).
type ownedGetter interface {
	GetFrom(owner int, key string) (string, error)
}

// get returns the value rank owner put under key.
func get(c pmi.Client, owner int, key string) (string, error) {
	if g, ok := c.(ownedGetter); ok {
		return g.GetFrom(owner, key)
	}
	return c.Get(key)
}

// KVS keys. Values hold no spaces, '=' or ';': node identities and
// Allgather data are base64url, fields are separated by ','.
const (
	keyRoot = "rmago-root"  // rank 0: secret hex "," rendezvous host:port
	keyRank = "rmago-rank-" // + rank: node "," machine "," listen IP
	keyAG   = "rmago-ag"    // + seq "-" rank "-" chunk: part of an Allgather contribution
	chunkAG = 512           // characters per KVS value (Hydra reads PMI-1 lines of 1024 bytes)
)

var enc = base64.RawURLEncoding

type pmiBoot struct {
	c      pmi.Client
	rank   int
	size   int
	secret []byte
	addr   string
	nodes  []string
	seq    int
	again  RendezvousConfig // how a later bootstrap of this process rejoins
	ownLn  *net.TCPListener // rank 0's rendezvous when no later bootstrap may use it
}

func startPMI(c pmi.Client, getenv func(string) string) (*pmiBoot, error) {
	b := &pmiBoot{c: c, rank: c.Rank(), size: c.Size()}
	var rendezvous string
	var ln *net.TCPListener
	if b.rank == 0 {
		b.secret = make([]byte, launch.SecretBytes)
		if _, err := rand.Read(b.secret); err != nil {
			return nil, err
		}
		b.addr = pmiAddr(getenv, 0, b.size, "")
		l, err := net.Listen("tcp", net.JoinHostPort(b.addr, "0"))
		if err != nil {
			return nil, fmt.Errorf("rank 0 listening on %s: %w", b.addr, err)
		}
		ln = l.(*net.TCPListener)
		rendezvous = ln.Addr().String()
		if err := c.Put(keyRoot, hex.EncodeToString(b.secret)+","+rendezvous); err != nil {
			ln.Close()
			return nil, err
		}
	}
	ok := false
	defer func() {
		if !ok && ln != nil {
			ln.Close()
		}
	}()
	if err := c.Fence(); err != nil {
		return nil, err
	}
	if b.rank != 0 {
		v, err := get(c, 0, keyRoot)
		if err != nil {
			return nil, fmt.Errorf("rank 0's entry: %w", err)
		}
		sec, rv, _ := strings.Cut(v, ",")
		if b.secret, err = hex.DecodeString(sec); err != nil || len(b.secret) < 16 {
			return nil, fmt.Errorf("rank 0's entry %s: bad secret", keyRoot)
		}
		rendezvous = rv
		host, _, err := net.SplitHostPort(rv)
		if err != nil {
			return nil, fmt.Errorf("rank 0's entry %s: bad address %q", keyRoot, rv)
		}
		b.addr = pmiAddr(getenv, b.rank, b.size, host)
	}
	machine := machineID()
	mine := enc.EncodeToString([]byte(LocalNode(getenv))) + "," + enc.EncodeToString([]byte(machine)) + "," + b.addr
	if err := c.Put(keyRank+strconv.Itoa(b.rank), mine); err != nil {
		return nil, err
	}
	if err := c.Fence(); err != nil {
		return nil, err
	}
	b.nodes = make([]string, b.size)
	machines := make([]string, b.size)
	addrs := make([]string, b.size)
	for r := range b.size {
		v := mine
		if r != b.rank {
			var err error
			if v, err = get(c, r, keyRank+strconv.Itoa(r)); err != nil {
				return nil, fmt.Errorf("rank %d's entry: %w", r, err)
			}
		}
		f := strings.Split(v, ",")
		var n, m []byte
		var err1, err2 error
		if len(f) == 3 {
			n, err1 = enc.DecodeString(f[0])
			m, err2 = enc.DecodeString(f[1])
		}
		if len(f) != 3 || err1 != nil || err2 != nil || net.ParseIP(f[2]) == nil {
			return nil, fmt.Errorf("rank %d's entry %q is malformed", r, v)
		}
		b.nodes[r], machines[r], addrs[r] = string(n), string(m), f[2]
	}
	if err := checkLoopback(addrs, machines); err != nil {
		return nil, err
	}
	b.again = RendezvousConfig{Rank: b.rank, Size: b.size, Rendezvous: rendezvous, Secret: b.secret,
		Addr: b.addr, Listener: ln, Nodes: b.nodes}
	ok = true
	return b, nil
}

// checkLoopback fails if a rank listens on a loopback address that ranks on
// another machine (or network namespace) could not reach.
func checkLoopback(addrs, machines []string) error {
	for r, a := range addrs {
		if !net.ParseIP(a).IsLoopback() {
			continue
		}
		for q := range addrs {
			if machines[q] != machines[r] {
				return fmt.Errorf("rank %d listens on %s, which rank %d on another host cannot reach: set %s to an address of the host's network",
					r, a, q, launch.EnvAddr)
			}
		}
	}
	return nil
}

func (b *pmiBoot) Rank() int       { return b.rank }
func (b *pmiBoot) Size() int       { return b.size }
func (b *pmiBoot) Secret() []byte  { return b.secret }
func (b *pmiBoot) Addr() string    { return b.addr }
func (b *pmiBoot) Nodes() []string { return b.nodes }
func (b *pmiBoot) String() string {
	return fmt.Sprintf("%s rank %d of %d", b.wireName(), b.rank, b.size)
}
func (b *pmiBoot) wireName() string { return wireName(b.c.Wire()) }

func wireName(w int) string {
	if w == pmi.WirePMIx {
		return "PMIx"
	}
	return "PMI-" + strconv.Itoa(w)
}

// Allgather puts mine into the KVS in chunks, fences, and gets every other
// rank's chunks. Keys are new for every call, so that a Get never sees an
// older call's value and, on Hydra's PMI-2 whose fence is not a barrier,
// waits for the rank that has not put it yet.
func (b *pmiBoot) Allgather(mine []byte) ([][]byte, error) {
	b.seq++
	all := make([][]byte, b.size)
	all[b.rank] = mine
	data := enc.EncodeToString(mine)
	n := max(1, (len(data)+chunkAG-1)/chunkAG)
	for i := range n {
		part := data[i*chunkAG : min(len(data), (i+1)*chunkAG)]
		if i == 0 {
			part = strconv.Itoa(n) + "," + part
		}
		if err := b.c.Put(b.agKey(b.rank, i), part); err != nil {
			return nil, fmt.Errorf("%w: %s allgather: %w", ErrBootstrap, b.wireName(), err)
		}
	}
	if err := b.c.Fence(); err != nil {
		return nil, fmt.Errorf("%w: %s allgather: %w", ErrBootstrap, b.wireName(), err)
	}
	for r := range b.size {
		if r == b.rank {
			continue
		}
		v, err := get(b.c, r, b.agKey(r, 0))
		if err != nil {
			return nil, fmt.Errorf("%w: %s allgather, rank %d's part: %w", ErrBootstrap, b.wireName(), r, err)
		}
		cnt, first, _ := strings.Cut(v, ",")
		k, err := strconv.Atoi(cnt)
		if err != nil || k < 1 || k > maxMsg/chunkAG {
			return nil, fmt.Errorf("%w: %s allgather: rank %d's part is malformed", ErrBootstrap, b.wireName(), r)
		}
		var sb strings.Builder
		sb.WriteString(first)
		for i := 1; i < k; i++ {
			v, err := get(b.c, r, b.agKey(r, i))
			if err != nil {
				return nil, fmt.Errorf("%w: %s allgather, rank %d's part %d: %w", ErrBootstrap, b.wireName(), r, i, err)
			}
			sb.WriteString(v)
		}
		if all[r], err = enc.DecodeString(sb.String()); err != nil {
			return nil, fmt.Errorf("%w: %s allgather: rank %d's data: %v", ErrBootstrap, b.wireName(), r, err)
		}
	}
	return all, nil
}

func (b *pmiBoot) agKey(r, chunk int) string {
	return keyAG + strconv.Itoa(b.seq) + "-" + strconv.Itoa(r) + "-" + strconv.Itoa(chunk)
}

// Close finalizes PMI: Hydra treats a process that exits without
// finalizing as failed and ends the job. The process manager closes the
// connection after the finalize.
func (b *pmiBoot) Close() error {
	if b.ownLn != nil {
		b.ownLn.Close()
	}
	err := b.c.Finalize()
	if cerr := b.c.Close(); err == nil && !errors.Is(cerr, net.ErrClosed) {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("%w: %s finalize: %w", ErrBootstrap, b.wireName(), err)
	}
	return nil
}
