// Package shm is rmago's provider for peers on the same node: the verbs
// contract over shared memory, so that windows and the sync protocols run
// unchanged between processes of one host.
//
// Memory that internal/memfd allocated (the transport's AllocMemory:
// allocated windows, control regions) is passed to a peer as a memfd over
// the queue pair's unix socket (SCM_RIGHTS) the first time the peer uses
// its rkey; the peer maps it and from then on an RDMA write or read is a
// copy done by the origin, and a fetch-and-add or compare-and-swap a CPU
// atomic on the mapped word (AtomicGlob: atomic against the owner's CPU
// too), and a bulk accumulate (verbs.OpAccumulate) element-wise CPU
// atomics on the mapped words (verbs/accop). Other memory (created
// windows: the caller's slice) is reached with process_vm_readv/writev;
// atomics and accumulates on it, and any copy the kernel refuses to attach
// to, go through the owner's socket, where a responder goroutine does them
// with the same CPU atomics. Every request completes at once, in the
// posting goroutine.
//
// The NIC's checks stay: each context publishes its memory regions in a
// shared table (key, address range, access, live) that the origin checks
// before every access, so a bad rkey, a region deregistered or an access
// out of bounds completes with a remote access error and leaves the target
// untouched; Dereg waits (bounded by the timeout) for accesses in flight.
//
// Writes with immediate data and sends land in a ring in the target's
// shared memory; the target's CQ.Poll drains its rings into posted
// receives. CQ.Wait spins briefly, then sleeps on a futex word in the
// completion queue's shared page, which a writer wakes only when a sleeper
// says it is there: no system call on the fast path.
//
// Connections are unix sockets in the abstract namespace, authenticated
// with the job's secret (internal/auth) and restricted to the same user
// (SO_PEERCRED). A peer whose socket ends without goodbye (it exited or
// was killed) fails its queue pairs at once, naming it. More, and the Put
// path through it: docs/architecture.md. Import the package for its side
// effect:
//
//	import _ "github.com/rmago/rmago/verbs/shm"
package shm

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rmago/rmago/internal/memfd"
	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/internal/keytab"
)

// Name is the name the provider registers under.
const Name = "shm"

func init() { verbs.Register(Name, provider{}) }

type provider struct{}

// The provider implements the verbs contract and the optional interfaces
// of a node-local provider.
var (
	_ verbs.Provider      = provider{}
	_ verbs.Context       = (*device)(nil)
	_ verbs.MemorySyncer  = (*device)(nil)
	_ verbs.ConnManager   = (*device)(nil)
	_ verbs.PD            = (*pd)(nil)
	_ verbs.MR            = (*region)(nil)
	_ verbs.CQ            = (*cq)(nil)
	_ verbs.Waker         = (*cq)(nil)
	_ verbs.QP            = (*qp)(nil)
	_ verbs.PostCompleter = (*qp)(nil)
	_ verbs.ErrorReporter = (*qp)(nil)
	_ verbs.ErrorSetter   = (*qp)(nil)
	_ verbs.PeerRunner    = (*qp)(nil)
	_ verbs.Mapper        = (*qp)(nil)
	_ verbs.ConnRequest   = (*connRequest)(nil)
)

// DefaultSpin is how long CQ.Wait polls before it sleeps on its futex,
// unless verbs.Config.ShmSpin (RMAGO_SHM_SPIN through transport) says
// otherwise. A futex wake-up costs tens of µs, and the wait for a peer's
// 8 MiB copy is a few hundred: polling through it is what a core of its
// own is for (fence3 at 8 MiB, 2 ranks: 850-1030 µs a round trip with 50
// µs of polling, 590-650 with 1 ms). On a node with more ranks than cores
// (verbs.Config.ShareCores) the wait gives the core to other processes
// between polls (sched_yield), so a polling rank does not keep the peer
// it waits for off the core; there too 1 ms beat the 50 µs it used to be
// (one-to-many fence3, 4 ranks on 2 cores, 8 B 83-128 -> 69-79 µs, 1 MiB
// 850-1025 -> 270-307 µs; no change for 32 ranks of apps/lockmix). A
// rank blocked for a second still spends only 1 ms of it polling.
const DefaultSpin = time.Millisecond

// maxSGE is the most scatter-gather entries a request may carry.
const maxSGE = 4

// maxSendBytes is the largest payload of a send (it travels in a ring slot).
const maxSendBytes = slotSize - slotHdr

func deviceAttr() verbs.DeviceAttr {
	return verbs.DeviceAttr{
		Name: "shm0", Provider: Name, MaxMRSize: 1 << 40, MaxQPWR: 1 << 15,
		MaxSGE: maxSGE, MaxInline: 1 << 30, AtomicCap: verbs.AtomicGlob, MTU: 1 << 20,
		LinkLayer: "shm", PortActive: true, PostCopiesPayload: true,
		CompletesAtPost: true, ReadsBeforeRecv: true, AtomicsInOrder: true, Accumulate: true, MaxFetchAccumulate: maxFetchAcc,
	}
}

// Devices lists the one shared-memory device.
func (provider) Devices() ([]verbs.DeviceAttr, error) {
	return []verbs.DeviceAttr{deviceAttr()}, nil
}

var ctxSeq atomic.Uint32

// Open starts the device: a listener on an abstract unix socket named
// after the job's secret and this process, and the shared region table.
func (provider) Open(devName string, cfg verbs.Config) (verbs.Context, error) {
	if devName != "" && devName != "shm0" {
		return nil, fmt.Errorf("%w: shm has only device shm0, not %q", verbs.ErrNoDevice, devName)
	}
	if len(cfg.Secret) == 0 {
		return nil, fmt.Errorf("%w: shm provider needs the job secret", verbs.ErrInvalid)
	}
	if cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: timeout %v", verbs.ErrInvalid, cfg.Timeout)
	}
	allowPtrace()
	sum := sha256.Sum256(append([]byte("rmago-shm-listen"), cfg.Secret...))
	name := fmt.Sprintf("@rmago-shm-%s-%d-%d", hex.EncodeToString(sum[:8]), os.Getpid(), ctxSeq.Add(1))
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: name, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("shm: listen on %s: %w", name, err)
	}
	tab, err := memfd.Alloc(tableBytes, "rmago-shm-table")
	if err != nil {
		ln.Close()
		return nil, err
	}
	c := &device{
		ln: ln, name: name, secret: append([]byte(nil), cfg.Secret...),
		timeout: cfg.Timeout, tabMem: tab, table: tableAt(unsafe.Pointer(unsafe.SliceData(tab.Bytes()))),
		qps: map[uint32]*qp{}, cqs: map[*cq]struct{}{}, pid: os.Getpid(),
	}
	c.notShared = reachVM
	c.shareCores = cfg.ShareCores
	c.procs = runtime.GOMAXPROCS(0)
	if cfg.ShmNoCMA {
		c.notShared = reachSock
	}
	switch {
	case cfg.ShmSpin == 0:
		c.spin = DefaultSpin
	case cfg.ShmSpin > 0:
		c.spin = cfg.ShmSpin
	}
	var b [4]byte
	rand.Read(b[:])
	c.nextQPN.Store(binary.LittleEndian.Uint32(b[:]) & 0x7fff00)
	c.wg.Add(1)
	go c.acceptLoop()
	return c, nil
}

// device is the open shm device.
type device struct {
	ln      *net.UnixListener
	name    string
	secret  []byte
	timeout time.Duration
	pid     int
	nextQPN atomic.Uint32
	// notShared is how memory outside any memfd is reached: reachVM, or
	// reachSock with verbs.Config.ShmNoCMA.
	notShared uint8
	// noProcFD: opening peers' memfds through /proc was refused once
	// (mapFromProc); regions are mapped by asking their owners.
	noProcFD atomic.Bool
	spin     time.Duration // CQ.Wait's polling before it sleeps (verbs.Config.ShmSpin)
	// shareCores: CQ.Wait's spin yields the core to other processes
	// (verbs.Config.ShareCores).
	shareCores bool
	// procs is GOMAXPROCS at open: CQ.Wait's yields to goroutines are
	// paced by it (spin.Yielder).
	procs int

	// Regions: the shared table peers check, and this process's view.
	tabMem  *memfd.Mem
	table   *table
	regions keytab.Table[region]

	mu       sync.Mutex
	qps      map[uint32]*qp
	cqs      map[*cq]struct{} // open completion queues, closed with the context
	acceptFn func(verbs.ConnRequest)
	closed   bool
	wg       sync.WaitGroup
}

func (c *device) Attr() verbs.DeviceAttr { return deviceAttr() }

func (c *device) AllocPD() (verbs.PD, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, verbs.ErrClosed
	}
	return &pd{ctx: c}, nil
}

// SyncMemory orders this process's view of accesses made by requests of
// its own queue pairs (verbs.MemorySyncer), and is a full memory fence for
// the plain loads and stores programs make to shared memory (rma's Sync on
// a shared window, MPI_Win_sync): a sequentially consistent
// read-modify-write, LOCK XADD on amd64, LDADDAL on arm64.
func (c *device) SyncMemory() { wireOrder.Add(0) }

func (c *device) Close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return verbs.ErrClosed
	}
	c.closed = true
	qps := make([]*qp, 0, len(c.qps))
	for _, q := range c.qps {
		qps = append(qps, q)
	}
	cqs := make([]*cq, 0, len(c.cqs))
	for q := range c.cqs {
		cqs = append(cqs, q)
	}
	c.mu.Unlock()
	err := c.ln.Close()
	for _, q := range qps {
		q.Close()
	}
	c.wg.Wait()
	for _, q := range cqs {
		q.Close()
	}
	c.tabMem.Free()
	return err
}

// pd is a protection domain.
type pd struct{ ctx *device }

func (p *pd) Close() error { return nil }

// wireOrder states, for Go's memory model and race detector, the edges a
// NIC gives: a post happens before the access it makes, which happens
// before the completion or the receive it produces is polled.
var wireOrder atomic.Uint64

func release() { wireOrder.Add(1) }
func acquire() { wireOrder.Load() }
