package rma

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/exp/constraints"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/sync/fence"
	"github.com/rmago/rmago/transport"
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
	reg    *transport.Region // nil for a zero-length window
	areg   *transport.Region // atomics' region when it differs from reg (see atomicBytes), else nil

	remotes []remoteWindow[T]
	fence   *fence.Fence
	ctrl    *control.Region
	locks   lockProtocol
	pscw    pscwProtocol

	// mu guards the fields below. It is held for a state transition or to
	// post an operation, never while waiting for a peer (see epochs).
	mu      sync.Mutex
	ep      epochs
	changed chan struct{} // closed when ep changes, if a goroutine waits for that (waitChange)
	ops     bool          // operations issued since the last synchronization
	puts    bool          // puts issued since the last synchronization
	reads   []pending     // per rank: reads or atomics to flush at the next synchronization
	lazy    []*lazyLock   // per rank: an exclusive lock taken lazily, not yet confirmed (lazy.go)
	lazyMem []lazyLock    // per rank: where lazy[t] points while set (no allocation per Lock)
	putTo   []bool        // per rank: puts or atomics into its window since the last fence
	inGroup []bool        // per rank: checkGroup's scratch, all false between calls
	flushes []int         // scratch for the fence
	cflush  []int         // scratch for Complete
	cafter  []int         // scratch for Complete: reads flushed after its notification
	freed   bool

	// gone is set with ep.freeing (Free has begun) and stays set:
	// isFreed's answer without win.mu, for the calls on this rank's own
	// memory (AwaitLocal, Sync) that take the mutex for nothing else.
	gone atomic.Bool
}

// remoteWindow is another rank's window, as the creation allgather told.
type remoteWindow[T Number] struct {
	addr  uint64 // element 0
	rkey  uint32 // puts and gets: a region of exactly the window's bytes
	akey  uint32 // atomics: a region of the 8-byte words that hold them
	count int

	// The window mapped for direct access (direct.go), once asked
	// (mapAsked): nil when it is reached through requests. Under win.mu.
	direct   []T
	mapAsked bool
	// viaRequests is 1 once asked and not mapped (atomic: read without
	// win.mu, so that an access to a peer reached through requests skips
	// the direct path's checks, directBegin).
	viaRequests uint32
}

// Allocate creates a window of n elements of library memory on every rank
// (n may differ between ranks, and may be 0). The memory is zeroed,
// page-aligned, outside the Go heap, and registered with the provider; Free
// releases it. It is collective: if it fails on one rank (an invalid n, no
// memory), it fails on every rank.
func Allocate[T Number](w *World, n int) (*Window[T], error) {
	return allocate[T](w, n, "Allocate", nil)
}

// allocate is Allocate for call; failed, if not nil, fails it on every
// rank.
func allocate[T Number](w *World, n int, call string, failed error) (*Window[T], error) {
	var zero T
	esize := int(unsafe.Sizeof(zero))
	win := &Window[T]{w: w, kind: Allocated, esize: esize}
	switch max := (1 << 40) / esize; {
	case failed != nil:
	case n < 0 || n > max:
		failed = fmt.Errorf("%w: %s of %d elements on rank %d (0 to %d allowed)", ErrSize, call, n, w.Rank(), max)
	case n > 0:
		mem, err := transport.AllocMemory(n * esize)
		if err != nil {
			failed = fmt.Errorf("%s of %d elements on rank %d: %w", call, n, w.Rank(), err)
		} else {
			win.mem = mem
			win.local = unsafe.Slice((*T)(mem.Ptr()), n)
		}
	}
	if err := win.setup(failed); err != nil {
		if win.mem != nil {
			win.mem.Free()
		}
		return nil, err
	}
	return win, nil
}

// Create exposes buf as a window on every rank (lengths may differ between
// ranks). buf stays pinned and registered until Free; the program keeps
// using it as the window's local memory (Local returns it). It is
// collective: if it fails on one rank, it fails on every rank.
//
// Atomics (Accumulate, FetchAndOp, CompareAndSwap, ...) work on every
// element. The NIC's atomics act on aligned 8-byte words, so when buf's
// first or last element of a type smaller than 8 bytes shares a word with
// memory outside buf, that word is registered for atomics only, and an
// atomic on the element is a compare-and-swap that writes the bytes outside
// buf back exactly as it found them. Puts and gets are confined to buf
// itself. With the soft provider, or a device whose atomics are atomic with
// respect to the CPU (verbs.AtomicGlob), a store the program makes to those
// outside bytes meanwhile is never lost; on other devices (verbs.AtomicHCA)
// do not store to them while peers may run atomics on the edge element, or
// give Create a slice whose ends are 8-byte aligned (Allocate's always are).
func Create[T Number](w *World, buf []T) (*Window[T], error) {
	var zero T
	esize := int(unsafe.Sizeof(zero))
	win := &Window[T]{w: w, kind: Created, esize: esize, local: buf}
	var failed error
	if len(buf) > 0 {
		if p := uintptr(unsafe.Pointer(unsafe.SliceData(buf))); p%uintptr(esize) != 0 {
			// Only possible through unsafe (or 8-byte elements on a 32-bit
			// machine): an element may then straddle two atomic words.
			failed = fmt.Errorf("%w: Create on rank %d: the slice starts at %#x, not a multiple of its %d-byte element size; "+
				"pass memory Go allocated for the element type", ErrAlign, w.Rank(), p, esize)
			win.local = nil
		} else {
			// The provider hands the address to the NIC: the memory must
			// not move while registered.
			win.pinner.Pin(unsafe.SliceData(buf))
		}
	}
	if err := win.setup(failed); err != nil {
		win.pinner.Unpin()
		return nil, err
	}
	return win, nil
}

// Creation descriptor, one per rank, exchanged by the creation allgather.
const (
	descAddr   = 0  // uint64: address of element 0
	descRKey   = 8  // uint32: key of puts and gets
	descCount  = 12 // uint64: elements
	descESize  = 20 // uint32: element size
	descID     = 24 // uint16: window id
	descFailed = 26 // byte: 1 if this rank's part of the creation failed
	descAKey   = 28 // uint32: key of atomics
	descKeys1  = 32 // uint32 ×2: the keys of puts and gets, and of atomics, on the fabric's second provider context (transport.Keys)
	descLen    = 40
)

// setup registers the memory and runs the creation allgather of the
// ranks' descriptors. failed is this rank's error so far: the rank still
// takes part in the allgather, so that every rank fails instead of waiting
// for it.
func (win *Window[T]) setup(failed error) error {
	w := win.w
	if err := w.check(); err != nil {
		return err
	}
	size := w.Size()
	var desc [descLen]byte
	if failed == nil && len(win.local) > 0 {
		failed = win.register()
	}
	w.mu.Lock()
	win.id = w.nextID
	w.nextID++
	w.mu.Unlock()
	if failed != nil {
		desc[descFailed] = 1
	} else if win.reg != nil {
		rkeys, akeys := win.reg.Keys(), win.reg.Keys()
		if win.areg != nil {
			akeys = win.areg.Keys()
		}
		binary.LittleEndian.PutUint64(desc[descAddr:], uint64(uintptr(unsafe.Pointer(unsafe.SliceData(win.local)))))
		binary.LittleEndian.PutUint32(desc[descRKey:], rkeys[0])
		binary.LittleEndian.PutUint32(desc[descAKey:], akeys[0])
		binary.LittleEndian.PutUint32(desc[descKeys1:], rkeys[1])
		binary.LittleEndian.PutUint32(desc[descKeys1+4:], akeys[1])
	}
	binary.LittleEndian.PutUint64(desc[descCount:], uint64(len(win.local)))
	binary.LittleEndian.PutUint32(desc[descESize:], uint32(win.esize))
	binary.LittleEndian.PutUint16(desc[descID:], win.id)
	all := make([][]byte, size)
	for r := range all {
		all[r] = make([]byte, len(desc))
	}
	err := w.f.Allgather(desc[:], all)
	if failed != nil {
		err = errors.Join(failed, err)
	}
	if err == nil {
		win.remotes = make([]remoteWindow[T], size)
		for r, d := range all {
			if d[descFailed] != 0 {
				err = fmt.Errorf("%w: rank %d could not create its part of window %d (its own error says why), so it fails on rank %d too",
					ErrMismatch, r, win.id, w.Rank())
				break
			}
			if es, id := binary.LittleEndian.Uint32(d[descESize:]), binary.LittleEndian.Uint16(d[descID:]); int(es) != win.esize || id != win.id {
				err = fmt.Errorf("%w: rank %d created window %d of %d-byte elements, rank %d window %d of %d-byte elements; "+
					"every rank must create the same windows, of the same element type, in the same order",
					ErrMismatch, r, id, es, w.Rank(), win.id, win.esize)
				break
			}
			win.remotes[r] = remoteWindow[T]{
				addr:  binary.LittleEndian.Uint64(d[descAddr:]),
				rkey:  w.f.KeyOf(r, transport.Keys{binary.LittleEndian.Uint32(d[descRKey:]), binary.LittleEndian.Uint32(d[descKeys1:])}),
				akey:  w.f.KeyOf(r, transport.Keys{binary.LittleEndian.Uint32(d[descAKey:]), binary.LittleEndian.Uint32(d[descKeys1+4:])}),
				count: int(binary.LittleEndian.Uint64(d[descCount:])),
			}
		}
	}
	if err != nil {
		win.deregister()
		return err
	}
	if win.reg != nil {
		w.register(win.bytes(), win.reg, win)
	}
	w.track(win, leftover{quiesce: win.quiesce, release: win.release})
	win.fence = fence.New(w.f, win.id)
	win.reads = make([]pending, size)
	win.lazy = make([]*lazyLock, size)
	win.lazyMem = make([]lazyLock, size)
	win.putTo = make([]bool, size)
	win.inGroup = make([]bool, size)
	win.ep.init(size)
	if win.ctrl, err = control.New(w.f); err != nil {
		win.release()
		return err
	}
	win.locks, win.pscw = newProtocols(win.ctrl, win.id)
	win.fence.UseControl(win.ctrl)
	win.flushes = make([]int, 0, size)
	win.cflush = make([]int, 0, size)
	return nil
}

// register registers the window's memory with the provider. Puts and gets
// use a region of exactly the window's bytes, so they can never reach
// memory outside it. Atomics use a region of the 8-byte words holding the
// window (atomicBytes); when those words reach outside a created window,
// that is a second region, for atomics only. Allocated windows own their
// page-rounded memory, so one region of the words serves both.
func (win *Window[T]) register() error {
	f := win.w.f
	b, words := win.bytes(), win.atomicBytes()
	if len(words) == len(b) || win.mem != nil {
		reg, err := f.Register(words, transport.AllAccess)
		if err != nil {
			return fmt.Errorf("registering window memory of %d bytes on rank %d: %w", len(words), win.w.Rank(), err)
		}
		win.reg = reg
		return nil
	}
	reg, err := f.Register(b, transport.PutGet)
	if err != nil {
		return fmt.Errorf("registering window memory of %d bytes on rank %d: %w", len(b), win.w.Rank(), err)
	}
	areg, err := f.Register(words, transport.AtomicsOnly)
	if err != nil {
		reg.Close()
		return fmt.Errorf("registering the %d bytes of 8-byte words of window memory on rank %d for atomics: %w", len(words), win.w.Rank(), err)
	}
	win.reg, win.areg = reg, areg
	return nil
}

// deregister undoes register.
func (win *Window[T]) deregister() {
	win.reg.Close()
	win.areg.Close()
	win.reg, win.areg = nil, nil
}

// bytes is the window's memory.
func (win *Window[T]) bytes() []byte {
	if len(win.local) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(win.local))), len(win.local)*win.esize)
}

// atomicBytes is the window's memory widened to whole 8-byte words, the
// unit of the NIC's atomics. The first or last element of a created window
// of 1-, 2- or 4-byte elements may share a word with memory outside the
// slice: memory of the same page, and, when the slice is on the Go heap,
// of the same allocation (the allocator's blocks are whole words). Atomics
// never change those bytes: a compare-and-swap writes them back as it found
// them.
func (win *Window[T]) atomicBytes() []byte {
	if len(win.local) == 0 {
		return nil
	}
	p := unsafe.Pointer(unsafe.SliceData(win.local))
	lo := int(uintptr(p) & 7)
	n := (lo + len(win.local)*win.esize + 7) &^ 7
	return unsafe.Slice((*byte)(unsafe.Add(p, -lo)), n)
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
	if err := win.freeCheck(); err != nil {
		return err
	}
	if err := win.w.check(); err != nil {
		return err
	}
	win.ep.freeing = true
	win.gone.Store(true)
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
// operations, unawaited lock releases), errors ignored: the job is ending.
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
	win.gone.Store(true)
	win.unmapPeers()
	win.deregister()
	if win.mem != nil {
		win.mem.Free()
		win.mem = nil
	}
	win.pinner.Unpin()
	win.local = nil
	if win.pscw != nil {
		win.pscw.Close()
	}
	if win.locks != nil {
		win.locks.Close() // releases posted without waiting
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
	win.ops, win.puts, win.putTo[target] = true, true, true
	win.reads[target] |= pendingAtomics
}

// pending says what a rank's issued operations need before a
// synchronization may let another rank at its memory.
type pending uint8

const (
	// pendingReads: gets, whose data a NIC, or soft's zero-copy answer,
	// may take from the target's memory after later requests executed.
	pendingReads pending = 1 << iota
	// pendingAtomics: accumulates and atomics, which a NIC may execute
	// after a later request of the queue pair (transport's
	// AtomicsInOrder says where they cannot).
	pendingAtomics
)
