package rma

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"golang.org/x/exp/constraints"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/sync/fence"
	"github.com/rmago/rmago/transport"
	"github.com/rmago/rmago/verbs"
)

// Number is the element type of a window: a fixed-size integer or float.
type Number interface {
	constraints.Integer | constraints.Float
}

// Kind says where a window's memory came from.
type Kind uint8

// Window kinds.
const (
	// Allocated windows own library memory mapped outside the Go heap.
	Allocated Kind = iota + 1
	// Created windows expose a caller's slice, pinned while registered.
	Created
)

func (k Kind) String() string {
	switch k {
	case Allocated:
		return "allocated"
	case Created:
		return "created"
	}
	return "unknown"
}

// Assert is a set of assertions a program makes to a synchronization call,
// as MPI's MPI_MODE_* values; they let the library skip work. 0 asserts
// nothing and is always correct.
type Assert uint8

// Assertions.
const (
	// NoPrecede (fence): no operations of this rank precede the fence in
	// this epoch, so there is nothing to complete.
	NoPrecede Assert = 1 << iota
	// NoSucceed (fence): no operations follow the fence; it closes the
	// access epoch.
	NoSucceed
	// NoStore (fence): the local window was not updated by local stores
	// since the last synchronization.
	NoStore
	// NoPut (fence): the local window will not be updated by puts or
	// accumulates until the next synchronization.
	NoPut
)

// Window is memory of every rank exposed for one-sided access, with
// elements of type T. Its methods are safe for concurrent use by several
// goroutines of a rank, except the collective Fence and Free, which one
// goroutine of each rank calls while no other call on the window runs
// (misuse is refused with an error, not a deadlock). Epochs belong to the
// window, as in MPI they belong to the process: an epoch one goroutine
// opens may be used and closed by others. See docs/api.md, "Concurrency".
type Window[T Number] struct {
	w     *World
	id    uint16
	kind  Kind
	local []T
	esize int

	mem    *transport.Memory // allocated windows
	pinner runtime.Pinner    // created windows
	mr     verbs.MR          // nil for a zero-length window

	remotes []remoteWindow
	fence   *fence.Fence
	ctrl    *control.Region
	locks   lockProtocol
	pscw    pscwProtocol

	// mu guards the fields below. It is held for a state transition or to
	// post an operation, never while waiting for a peer (see epochs).
	mu          sync.Mutex
	ep          epochs
	changed     chan struct{} // closed when ep changes, if a goroutine waits for that (waitChange)
	ops         bool          // operations issued since the last synchronization
	puts        bool          // puts issued since the last synchronization
	reads       []bool        // per rank: reads or atomics to flush at the next synchronization
	inGroup     []bool        // per rank: checkGroup's scratch, all false between calls
	flushes     []int         // scratch for the fence
	cflush      []int         // scratch for Complete
	noCheckLock []bool        // per target: the lock was taken with NoCheck
	freed       bool
}

// remoteWindow is another rank's window, as the creation allgather told.
type remoteWindow struct {
	addr   uint64
	rkey   uint32
	count  int
	regLen uint64 // registered bytes: count*esize, rounded up to 8 for allocated windows
}

// Allocate creates a window of n elements of library memory on every rank
// (n may differ between ranks, and may be 0). The memory is zeroed,
// page-aligned, outside the Go heap, and registered with the provider; Free
// releases it. It is collective.
func Allocate[T Number](w *World, n int) (*Window[T], error) {
	var zero T
	esize := int(unsafe.Sizeof(zero))
	if n < 0 || n > (1<<40)/esize {
		return nil, fmt.Errorf("%w: window of %d elements", ErrSize, n)
	}
	win := &Window[T]{w: w, kind: Allocated, esize: esize}
	if n > 0 {
		mem, err := transport.AllocMemory(n * esize)
		if err != nil {
			return nil, err
		}
		win.mem = mem
		win.local = unsafe.Slice((*T)(mem.Ptr()), n)
	}
	if err := win.setup(); err != nil {
		if win.mem != nil {
			win.mem.Free()
		}
		return nil, err
	}
	return win, nil
}

// Create exposes buf as a window on every rank (lengths may differ between
// ranks). buf stays pinned and registered until Free; the program keeps
// using it as the window's local memory (Local returns it). It is collective.
func Create[T Number](w *World, buf []T) (*Window[T], error) {
	var zero T
	win := &Window[T]{w: w, kind: Created, esize: int(unsafe.Sizeof(zero)), local: buf}
	if len(buf) > 0 {
		// The provider hands the address to the NIC: the memory must not
		// move while registered.
		win.pinner.Pin(unsafe.SliceData(buf))
	}
	if err := win.setup(); err != nil {
		win.pinner.Unpin()
		return nil, err
	}
	return win, nil
}

// setup registers the memory and runs the creation allgather of (address,
// rkey, element count, element size, window id).
func (win *Window[T]) setup() error {
	w := win.w
	if err := w.check(); err != nil {
		return err
	}
	size := w.Size()
	var desc [40]byte
	if len(win.local) > 0 {
		b := win.bytes()
		if win.mem != nil {
			// Allocated memory is page-rounded: register whole 8-byte
			// words so atomics reach the last elements of small types.
			b = win.mem.Bytes()[:(len(b)+7)&^7]
		}
		mr, err := w.f.PD().RegMR(b, verbs.AccessAll)
		if err != nil {
			return err
		}
		win.mr = mr
		binary.LittleEndian.PutUint64(desc[0:], mr.Addr())
		binary.LittleEndian.PutUint32(desc[8:], mr.RKey())
		binary.LittleEndian.PutUint64(desc[32:], uint64(mr.Len()))
	}
	w.mu.Lock()
	win.id = w.nextID
	w.nextID++
	w.mu.Unlock()
	binary.LittleEndian.PutUint64(desc[12:], uint64(len(win.local)))
	binary.LittleEndian.PutUint32(desc[20:], uint32(win.esize))
	binary.LittleEndian.PutUint16(desc[24:], win.id)
	all := make([][]byte, size)
	for r := range all {
		all[r] = make([]byte, len(desc))
	}
	err := w.f.Allgather(desc[:], all)
	if err == nil {
		win.remotes = make([]remoteWindow, size)
		for r, d := range all {
			if es, id := binary.LittleEndian.Uint32(d[20:]), binary.LittleEndian.Uint16(d[24:]); int(es) != win.esize || id != win.id {
				err = fmt.Errorf("%w: rank %d created window %d of %d-byte elements, rank %d window %d of %d-byte elements",
					ErrMismatch, r, id, es, w.Rank(), win.id, win.esize)
				break
			}
			win.remotes[r] = remoteWindow{
				addr:   binary.LittleEndian.Uint64(d[0:]),
				rkey:   binary.LittleEndian.Uint32(d[8:]),
				count:  int(binary.LittleEndian.Uint64(d[12:])),
				regLen: binary.LittleEndian.Uint64(d[32:]),
			}
		}
	}
	if err != nil {
		if win.mr != nil {
			win.mr.Dereg()
		}
		return err
	}
	if win.mr != nil {
		w.register(win.bytes(), win.mr, win)
	}
	w.track(win, leftover{quiesce: win.quiesce, release: win.release})
	win.fence = fence.New(w.f, win.id)
	win.reads = make([]bool, size)
	win.inGroup = make([]bool, size)
	win.noCheckLock = make([]bool, size)
	win.ep.init(size)
	if win.ctrl, err = control.New(w.f); err != nil {
		win.release()
		return err
	}
	win.locks, win.pscw = newProtocols(win.ctrl)
	win.flushes = make([]int, 0, size)
	win.cflush = make([]int, 0, size)
	return nil
}

func (win *Window[T]) bytes() []byte {
	if len(win.local) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(win.local))), len(win.local)*win.esize)
}

// Local is this rank's own window memory. Peers' puts land in it; read it
// after the synchronization that completes them.
func (win *Window[T]) Local() []T { return win.local }

// Len is the number of elements in this rank's window.
func (win *Window[T]) Len() int { return len(win.local) }

// LenAt is the number of elements in rank r's window.
func (win *Window[T]) LenAt(r int) int {
	if r < 0 || r >= len(win.remotes) {
		return 0
	}
	return win.remotes[r].count
}

// Kind says whether the window is Allocated or Created.
func (win *Window[T]) Kind() Kind { return win.kind }

// World is the World the window belongs to.
func (win *Window[T]) World() *World { return win.w }

// Free releases the window on every rank: a barrier (so no rank still
// accesses this one), then deregistration, and for allocated windows the
// memory is unmapped (Local must not be used after). It fails with
// ErrEpochOpen, leaving the window usable, while an epoch other than a
// fence epoch is open or operations are incomplete (the error says which
// call ends it). It is collective and, like Fence, must not run
// concurrently with other calls on the window: operations issued while it
// runs fail with ErrFreed.
func (win *Window[T]) Free() error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if err := win.liveLocked("Free"); err != nil {
		return err
	}
	switch e := win.ep.open(); {
	case e != "":
		return win.errf(ErrEpochOpen, "Free while %s", e)
	case win.ep.fence == fenceRunning:
		return win.errf(ErrEpochOpen, "Free while a Fence is running (Free and Fence are collective: call them from one goroutine of each rank)")
	case win.ep.ninflight > 0:
		return win.errf(ErrEpochOpen, "Free while other goroutines' accumulates are running")
	case win.ops:
		return win.errf(ErrEpochOpen, "Free after operations that no synchronization completed yet (call Fence(NoSucceed) first)")
	}
	if err := win.w.check(); err != nil {
		return err
	}
	win.ep.freeing = true
	win.changedState()
	win.mu.Unlock()
	err := win.fence.Sync(nil, false)
	win.w.unregister(win)
	win.mu.Lock()
	win.release()
	if err != nil {
		return win.wrapf(err, "Free")
	}
	return nil
}

// quiesce completes this rank's outstanding work on the window (pending
// operations, PSCW post atomics), errors ignored: the job is ending.
func (win *Window[T]) quiesce() {
	win.mu.Lock()
	clear(win.reads)
	p := win.pscw
	win.pscw = nil
	win.mu.Unlock()
	win.completeTo(-1)
	if p != nil {
		p.Close()
	}
}

// release deregisters and frees (or unpins) the window's memory; win.mu
// held, or the window not yet shared.
func (win *Window[T]) release() {
	win.freed = true
	if win.mr != nil {
		win.mr.Dereg()
		win.mr = nil
	}
	if win.mem != nil {
		win.mem.Free()
		win.mem = nil
	}
	win.pinner.Unpin()
	win.local = nil
	if win.pscw != nil {
		win.pscw.Close()
	}
	if win.ctrl != nil {
		win.ctrl.Close()
	}
}

// opsOn records an operation to target since the last synchronization.
func (win *Window[T]) opsOn(target int) { win.ops = true }

// atomicsOn records accumulates or atomics to target: they change its
// memory (the fence's second round must run) and are flushed at the next
// synchronization, like reads.
func (win *Window[T]) atomicsOn(target int) {
	win.ops, win.puts, win.reads[target] = true, true, true
}
