package rma

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/rma/internal/join"
	"github.com/rmago/rmago/transport"
)

// World is this rank's membership of a job: its rank, the job's size, and
// the connected fabric every window uses.
type World struct {
	f    *transport.Fabric
	topo transport.Topology

	mu sync.Mutex
	// regs: registered memory usable as origin buffers, replaced (under
	// mu) and never changed in place, so that the data path reads it
	// without a lock.
	regs   atomic.Pointer[[]localRegion]
	open   map[any]leftover // windows not yet freed
	nextID uint16
	closed bool

	stageMu sync.Mutex // guards stage
	stage   *stager

	atomicMu sync.Mutex // guards atom
	atom     *atomArea

	// bulkAcc: the provider executes bulk accumulates (bulk.go), fetching
	// ones of up to maxFetch bytes.
	bulkAcc  bool
	maxFetch int
}

// atomWords is the size, in 8-byte words, of the registered area where the
// old values of this rank's remote atomics land; longer accumulates go in
// pieces.
const atomWords = 4096

// atomArea is the landing area of remote atomics' results, with the
// bookkeeping of a compare-and-swap round.
type atomArea struct {
	reg   *transport.Region
	words []uint64
	guess []uint64
	done  []bool
	ops   []transport.Atomic  // one round's atomics, posted as chains
	seen  [seenSlots]seenWord // last known values of remote words
}

// Compare-and-swap rounds must guess a word's value; a wrong guess costs a
// round trip. seen remembers, direct-mapped by (rank, address), the value
// each recently accumulated word was left holding by this rank (what its
// last successful swap wrote, or what a failed one returned). A word only
// this rank changes, such as a flag it sets with Replace, is then swapped
// in one round trip instead of two. A stale entry (another rank changed the
// word, or the memory now belongs to another window) only costs the round
// trip it would have cost anyway.
const seenSlots = 256

type seenWord struct {
	rank int
	addr uint64
	val  uint64
}

func seenSlot(rank int, addr uint64) int {
	return int((addr>>3)^uint64(rank)*0x9e3779b1) & (seenSlots - 1)
}

// guessFor returns the remembered value of the word, or 0.
func (a *atomArea) guessFor(rank int, addr uint64) uint64 {
	if e := &a.seen[seenSlot(rank, addr)]; e.addr == addr && e.rank == rank {
		return e.val
	}
	return 0
}

// remember records the word's last known value.
func (a *atomArea) remember(rank int, addr, val uint64) {
	a.seen[seenSlot(rank, addr)] = seenWord{rank: rank, addr: addr, val: val}
}

func newAtomArea(w *World) (*atomArea, error) {
	reg, err := w.f.AllocRegion((atomWords+1)*8, transport.AllAccess) // the words, then the sink
	if err != nil {
		return nil, err
	}
	return &atomArea{reg: reg, words: reg.Words()[:atomWords],
		guess: make([]uint64, atomWords), done: make([]bool, atomWords), ops: make([]transport.Atomic, atomWords)}, nil
}

func (a *atomArea) local(i int) transport.Local {
	return a.reg.Local(8 * i)
}

// sink is where the old values of fetch-adds that nobody waits for land
// (Accumulate(Sum) on 8-byte integers, completed at the next
// synchronization): a word of its own, never read. Landing in words, such a
// fetch-add to one rank could complete after a later atomic to another rank
// and overwrite that atomic's result before it is read.
func (a *atomArea) sink() transport.Local { return a.local(atomWords) }

// word is the result of the atomic that landed in word i (read after its completion).
func (a *atomArea) word(i int) uint64 { return a.words[i] }

func (a *atomArea) free() {
	a.reg.Close()
}

// localRegion is registered local memory: origin buffers inside it need no copy.
type localRegion struct {
	start, end uintptr
	lkey       uint32
	owner      any
}

// Options configure InitWith. The zero value of a field reads the
// environment (docs/launch.md).
type Options struct {
	Provider string        // soft, shm, ibv or auto; "" reads RMAGO_PROVIDER
	Device   string        // the provider's device; "" reads RMAGO_DEVICE
	Timeout  time.Duration // bound of every blocking wait; 0 reads RMAGO_TIMEOUT, negative means none
	Connect  string        // lazy or eager connection of peers; "" reads RMAGO_CONNECT
	// Notice receives one-line notices (the auto provider's fallback to
	// soft); nil writes them to stderr.
	Notice func(string)
}

func (o Options) transport() transport.Options {
	return transport.Options{Provider: o.Provider, Device: o.Device, Timeout: o.Timeout, Connect: o.Connect, Notice: o.Notice}
}

// Device describes the fabric device a World uses.
type Device struct {
	Name      string // device name: soft0 (soft), shm0 (shm), else mlx5_0, rxe0, ...
	Provider  string // soft, shm or ibv
	NetDev    string // network interface the device sits on, when known
	LinkLayer string // InfiniBand, Ethernet (RoCE), TCP (soft) or shm
	MTU       int    // active path MTU in bytes
	MaxRegion uint64 // largest memory the device registers (a window's bytes)
}

func init() {
	join.World = func(b transport.Bootstrap, opt transport.Options) (any, error) { return initWith(b, opt) }
}

// Init joins the job the environment describes: rmarun's (RMAGO_RANK,
// RMAGO_SIZE, RMAGO_RENDEZVOUS, RMAGO_SECRET, RMAGO_ADDR, RMAGO_PROVIDER),
// else a PMI launcher's (MPICH's mpiexec, srun --mpi=pmi2; PMI-1, or PMI-2
// with RMAGO_PMI=2). A program started on its own runs as a job of one rank;
// one started as a rank of a job rmago cannot join (Open MPI's mpirun,
// srun without --mpi=pmi2) gets an error naming a command that works.
// See docs/launch.md. It is collective.
func Init() (*World, error) {
	return InitWith(Options{})
}

// InitWith is Init with explicit options.
func InitWith(opt Options) (*World, error) {
	b, err := transport.BootstrapFromEnv()
	if err != nil {
		return nil, err
	}
	w, err := initWith(b, opt.transport())
	if err == nil {
		// This process is one rank of the job: take its node's share of
		// the cores (internal/launch.CoreShare), whatever launched it.
		if p := launch.CoreShare(w.topo.NodeSize()); p > 0 {
			runtime.GOMAXPROCS(p)
		}
	}
	return w, err
}

// initWith joins the job that bootstrap b describes.
func initWith(b transport.Bootstrap, opt transport.Options) (*World, error) {
	topo, err := transport.TopologyOf(b)
	if err != nil {
		b.Close()
		return nil, err
	}
	f, err := transport.Open(b, opt)
	if err != nil {
		return nil, err
	}
	w := &World{f: f, topo: topo}
	w.bulkAcc, w.maxFetch = f.BulkAccumulate()
	if w.stage, err = newStager(w); err != nil {
		f.Close()
		return nil, err
	}
	if w.atom, err = newAtomArea(w); err != nil {
		w.stage.free()
		f.Close()
		return nil, err
	}
	return w, nil
}

// Rank is this process's rank, in [0, Size()).
func (w *World) Rank() int { return w.f.Rank() }

// Size is the number of ranks in the job.
func (w *World) Size() int { return w.f.Size() }

// NodeRank is this rank's index among the ranks on its node (see LocalPeers).
func (w *World) NodeRank() int { return w.topo.NodeRank() }

// NodeSize is the number of ranks on this rank's node, itself included.
func (w *World) NodeSize() int { return w.topo.NodeSize() }

// LocalPeers returns the ranks on this rank's node, itself included, in
// ascending order: the ranks whose node identity (host, boot, network
// namespace, launcher's node name, or RMAGO_NODE) equals this rank's.
func (w *World) LocalPeers() []int { return w.topo.LocalPeers() }

// Provider describes the device in use: the network provider's in a
// mixed job (ProviderOf says which provider carries each peer), shm0 when
// every rank is on one node and the default provider runs, soft0 on soft.
func (w *World) Provider() Device {
	d := w.f.Device()
	return Device{Name: d.Name, Provider: d.Provider, NetDev: d.NetDev, LinkLayer: d.LinkLayer, MTU: d.MTU,
		MaxRegion: d.MaxMRSize}
}

// ProviderOf names the provider that carries this rank's operations to
// rank (itself included): "shm" for a node-local peer in a mixed job
// (RMAGO_PROVIDER=auto, the default), "soft" or "ibv" for the others, or
// the one provider RMAGO_PROVIDER forces. Provider describes the network
// device.
func (w *World) ProviderOf(rank int) (string, error) {
	if rank < 0 || rank >= w.Size() {
		return "", fmt.Errorf("%w: rank %d of a job of %d", ErrRank, rank, w.Size())
	}
	return w.f.ProviderOf(rank), nil
}

// Timeout is the bound on every blocking call of the World and its
// windows (RMAGO_TIMEOUT, default 2 minutes; 0 means none). A program's
// own waits (polling its memory for a peer's put) can use the same bound.
func (w *World) Timeout() time.Duration { return w.f.Timeout() }

// Barrier returns once every rank has called it.
func (w *World) Barrier() error {
	if err := w.check(); err != nil {
		return err
	}
	return w.f.Barrier()
}

// Close leaves the job: a final barrier, so that no rank is still reaching
// this one, then the fabric is torn down. Free windows first; windows still
// open become unusable. It is collective.
func (w *World) Close() error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return fmt.Errorf("%w: rank %d called Close twice", ErrClosed, w.Rank())
	}
	w.closed = true
	left := w.open
	w.open = nil
	w.mu.Unlock()
	// Windows the program did not free: finish this rank's own work on
	// them while every peer is still there, then release them once no
	// rank can reach them any more.
	for _, l := range left {
		l.quiesce()
	}
	err := w.f.LeaveBarrier()
	// Leave before deregistering: a peer still sending here is told that
	// this rank left (ErrPeerGone), not that its access was refused.
	w.f.Disconnect()
	for _, l := range left {
		l.release()
	}
	w.stage.free()
	w.atom.free()
	return errors.Join(err, w.f.Close())
}

func (w *World) check() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return fmt.Errorf("%w: rank %d already called Close; windows and barriers need an open World", ErrClosed, w.Rank())
	}
	return nil
}

// register records registered memory usable as origin buffers.
func (w *World) register(b []byte, reg *transport.Region, owner any) {
	start := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
	w.mu.Lock()
	var regs []localRegion
	if old := w.regs.Load(); old != nil {
		regs = append(regs, *old...)
	}
	regs = append(regs, localRegion{start: start, end: start + uintptr(len(b)), lkey: reg.Local(0).LKey, owner: owner})
	w.regs.Store(&regs)
	w.mu.Unlock()
}

// leftover is how Close deals with a window the program did not free.
type leftover struct {
	quiesce func() // complete this rank's outstanding work on it
	release func() // deregister and free it
}

// track records a window, for Close to release it if the program does not.
func (w *World) track(owner any, l leftover) {
	w.mu.Lock()
	if w.open == nil {
		w.open = map[any]leftover{}
	}
	w.open[owner] = l
	w.mu.Unlock()
}

func (w *World) unregister(owner any) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.open, owner)
	old := w.regs.Load()
	if old == nil {
		return
	}
	regs := make([]localRegion, 0, len(*old))
	for _, r := range *old {
		if r.owner != owner {
			regs = append(regs, r)
		}
	}
	w.regs.Store(&regs)
}

// local finds the registered memory that holds [p, p+n), if any.
func (w *World) local(p unsafe.Pointer, n uintptr) (transport.Local, bool) {
	a := uintptr(p)
	regs := w.regs.Load()
	if regs == nil {
		return transport.Local{}, false
	}
	for _, r := range *regs {
		if a >= r.start && a+n <= r.end {
			return transport.Local{Addr: uint64(a), LKey: r.lkey}, true
		}
	}
	return transport.Local{}, false
}

func (w *World) String() string {
	return fmt.Sprintf("rma.World(rank %d of %d, %s)", w.Rank(), w.Size(), w.f.Device().Name)
}
