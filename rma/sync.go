package rma

import (
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/rmago/rmago/transport"
)

// epochs is a window's synchronization state, a small state machine: which
// access epochs are open (fence, lock per target, lock_all, PSCW access to a
// group) and whether a PSCW exposure epoch is open. Operations need an
// access epoch to their target; synchronization calls that do not fit the
// state fail with an errors.Is-able error and change nothing.
type epochs struct {
	fence    bool    // a fence epoch is open (Fence without NoSucceed)
	lockAll  bool    // LockAll held
	lock     []uint8 // per target: lockNone, lockShared or lockExclusive
	nlocks   int     // targets locked
	started  []bool  // PSCW access epoch targets
	access   bool    // a PSCW access epoch is open
	exposure bool    // a PSCW exposure epoch is open
}

const (
	lockNone uint8 = iota
	lockShared
	lockExclusive
)

func (e *epochs) init(size int) {
	e.lock = make([]uint8, size)
	e.started = make([]bool, size)
}

func (e *epochs) canAccess(target int) bool {
	return e.fence || e.lockAll || e.lock[target] != lockNone || e.started[target]
}

// open names an open epoch, or "" if none is.
func (e *epochs) open() string {
	switch {
	case e.lockAll:
		return "LockAll is held"
	case e.nlocks > 0:
		return "a lock is held"
	case e.access:
		return "an access epoch (Start) is open"
	case e.exposure:
		return "an exposure epoch (Post) is open"
	}
	return ""
}

// LockType is the kind of a passive-target lock.
type LockType uint8

// Lock types.
const (
	// Exclusive: no other rank holds any lock on the target meanwhile.
	Exclusive LockType = iota + 1
	// Shared: other shared holders (and LockAll holders) may overlap.
	Shared
)

// NoCheck (Lock, LockAll, Post, Start): the program guarantees that no
// conflicting lock is held or requested meanwhile, or that the matching
// Post has already happened; the library skips the protocol's atomics.
const NoCheck Assert = 1 << 7

// Fence synchronizes the window collectively (MPI_Win_fence): every
// operation this rank issued since the previous fence is complete when it
// returns (puts are in the targets' memory, gets in the origin slices), and
// every rank's puts into this rank's window are visible in Local. It opens
// the next access epoch, unless assert has NoSucceed. It fails with
// ErrEpochConflict while locks or a PSCW epoch are open.
func (win *Window[T]) Fence(assert Assert) error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if win.freed {
		return ErrFreed
	}
	if e := win.ep.open(); e != "" {
		return fmt.Errorf("%w: fence while %s", ErrEpochConflict, e)
	}
	win.flushes = win.flushes[:0]
	if assert&NoPrecede == 0 {
		for r, yes := range win.reads {
			if yes {
				win.flushes = append(win.flushes, r)
				win.reads[r] = false
			}
		}
	} else if win.ops {
		return fmt.Errorf("%w: fence with NoPrecede after operations", ErrEpochOpen)
	}
	err := win.fence.Sync(win.flushes, win.puts)
	if err == nil {
		err = win.w.drainStage()
	}
	win.puts = false
	win.ops = false
	win.ep.fence = assert&NoSucceed == 0
	return err
}

func (w *World) drainStage() error {
	w.stageMu.Lock()
	defer w.stageMu.Unlock()
	return w.stage.drain()
}

// flushLocked completes every operation this rank issued to target (all
// ranks if target < 0): remote completion, and Get data in place.
func (win *Window[T]) flushLocked(target int) error {
	f := win.w.f
	var err error
	if target < 0 {
		err = f.FlushAll()
		clear(win.reads)
	} else {
		err = f.Flush(target)
		win.reads[target] = false
	}
	if err == nil {
		err = win.w.drainStage()
	}
	return err
}

// Flush completes, at the target, every operation this rank issued to
// rank target on this window: puts and accumulates are in its memory, gets
// in their origin slices. It is valid inside passive-target (lock) epochs.
func (win *Window[T]) Flush(target int) error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if err := win.syncCheck(target); err != nil {
		return err
	}
	return win.flushLocked(target)
}

// FlushAll is Flush to every rank.
func (win *Window[T]) FlushAll() error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if win.freed {
		return ErrFreed
	}
	return win.flushLocked(-1)
}

// FlushLocal completes this rank's operations to target locally: origin
// buffers may be reused. On rmago it is Flush (remote completion implies
// local completion, and costs the same round trip).
func (win *Window[T]) FlushLocal(target int) error { return win.Flush(target) }

// FlushLocalAll is FlushLocal to every rank.
func (win *Window[T]) FlushLocalAll() error { return win.FlushAll() }

// Sync synchronizes this rank's view of its own window memory with the
// changes peers made through the fabric (MPI_Win_sync): after it, plain
// reads of Local see every change whose completion this rank has learned
// of by synchronization (a flag read with LoadLocal, say).
func (win *Window[T]) Sync() error {
	if win.freed {
		return ErrFreed
	}
	win.w.f.SyncMemory()
	return nil
}

// LoadLocal reads element i of this rank's own window atomically, for
// polling a flag that peers set with an atomic (Accumulate with Replace,
// FetchAndOp, CompareAndSwap; not a plain Put, see docs/memory-model.md).
// Peers' changes become visible to it without any synchronization call;
// WaitLocal is the blocking form.
func (win *Window[T]) LoadLocal(i int) T {
	p := unsafe.Pointer(&win.local[i])
	if win.esize == 8 {
		return fromBits[T](atomic.LoadUint64((*uint64)(p)))
	}
	sh := int(uintptr(p) & 7)
	off := i*win.esize - sh // byte offset of the word in the window
	if off < 0 || off+8 > len(win.local)*win.esize {
		// An unaligned edge of a created window: peers cannot run atomics
		// on it (ErrAlign), so there is no atomic to pair with.
		return win.local[i]
	}
	w := atomic.LoadUint64((*uint64)(unsafe.Add(p, -sh)))
	return elemAt[T](w, uint(sh))
}

// WaitLocal waits until cond holds for element i of this rank's own window
// (read with LoadLocal), for a flag or counter that peers change through
// the fabric. Between checks it drives the fabric itself (with the soft
// provider it runs the peers' requests as they arrive, so the update lands
// without waking another goroutine); once nothing has arrived for
// transport.LocalSpin it sleeps between checks (transport.LocalWait). It
// fails with an error wrapping transport.ErrTimeout after the fabric's
// timeout (RMAGO_TIMEOUT). Prefer it to a loop of your own, which would
// leave the soft provider's progress to a goroutine woken for every
// message.
func (win *Window[T]) WaitLocal(i int, cond func(T) bool) error {
	if win.freed {
		return ErrFreed
	}
	if i < 0 || i >= len(win.local) {
		return fmt.Errorf("%w: element %d of a window of %d", ErrRange, i, len(win.local))
	}
	lw := win.w.f.NewLocalWait()
	defer lw.Done()
	for {
		if cond(win.LoadLocal(i)) {
			win.w.f.SyncMemory()
			return nil
		}
		if !lw.Pause() {
			return fmt.Errorf("%w: waiting on element %d of window %d", transport.ErrTimeout, i, win.id)
		}
	}
}

func (win *Window[T]) syncCheck(target int) error {
	if win.freed {
		return ErrFreed
	}
	if target < 0 || target >= len(win.remotes) {
		return fmt.Errorf("%w: rank %d of %d", ErrRank, target, len(win.remotes))
	}
	return nil
}

// Lock opens a passive-target access epoch to rank target (MPI_Win_lock):
// Exclusive excludes every other lock on target, Shared only exclusive
// ones. The target takes no part. Locks on several targets may be held at
// once. It fails with ErrEpochConflict inside a fence or PSCW epoch or if
// this rank already holds a lock on target.
func (win *Window[T]) Lock(target int, typ LockType, assert Assert) error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if err := win.syncCheck(target); err != nil {
		return err
	}
	switch {
	case typ != Exclusive && typ != Shared:
		return fmt.Errorf("%w: lock type %d", ErrEpochConflict, typ)
	case win.ep.fence:
		return fmt.Errorf("%w: Lock inside a fence epoch (end it with Fence(NoSucceed))", ErrEpochConflict)
	case win.ep.access:
		return fmt.Errorf("%w: Lock inside a PSCW access epoch", ErrEpochConflict)
	case win.ep.lockAll:
		return fmt.Errorf("%w: Lock while LockAll is held", ErrEpochConflict)
	case win.ep.lock[target] != lockNone:
		return fmt.Errorf("%w: rank %d is already locked", ErrEpochConflict, target)
	}
	lockFn := win.locks.Lock
	if assert&NoCheck != 0 {
		lockFn = win.locks.LockNoCheck
	}
	if err := lockFn(target, typ == Exclusive); err != nil {
		return err
	}
	win.noCheckLock[target] = assert&NoCheck != 0
	win.ep.lock[target] = lockShared
	if typ == Exclusive {
		win.ep.lock[target] = lockExclusive
	}
	win.ep.nlocks++
	return nil
}

// Unlock completes every operation to target (as Flush) and releases the
// lock (MPI_Win_unlock). ErrNotLocked if no lock on target is held.
func (win *Window[T]) Unlock(target int) error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if err := win.syncCheck(target); err != nil {
		return err
	}
	typ := win.ep.lock[target]
	if typ == lockNone {
		return fmt.Errorf("%w: rank %d", ErrNotLocked, target)
	}
	// The release atomic follows this rank's puts to target down the same
	// queue pair, which executes them in order, and its completion (which
	// Unlock waits for) implies theirs: puts need no separate flush round
	// trip. Reads and atomics do: a read's data may still be on its way
	// (IB orders them before later requests only with a fence), and a
	// writer let in by the release would tear it. A NoCheck lock has no
	// atomic to wait for.
	var err error
	if win.noCheckLock[target] || win.reads[target] {
		err = win.w.f.Flush(target)
	}
	if err == nil {
		err = win.locks.Unlock(target, typ == lockExclusive)
	}
	win.reads[target] = false
	if err == nil {
		err = win.w.drainStage()
	}
	win.ep.lock[target] = lockNone
	win.ep.nlocks--
	win.ops = win.ep.nlocks > 0 && win.ops
	return err
}

// LockAll opens a shared passive-target epoch to every rank
// (MPI_Win_lock_all) with one remote atomic, whatever the job size.
func (win *Window[T]) LockAll(assert Assert) error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if win.freed {
		return ErrFreed
	}
	switch {
	case win.ep.fence:
		return fmt.Errorf("%w: LockAll inside a fence epoch (end it with Fence(NoSucceed))", ErrEpochConflict)
	case win.ep.access || win.ep.lockAll || win.ep.nlocks > 0:
		return fmt.Errorf("%w: LockAll while %s", ErrEpochConflict, win.ep.open())
	}
	lockAll := win.locks.LockAll
	if assert&NoCheck != 0 {
		lockAll = win.locks.LockAllNoCheck
	}
	if err := lockAll(); err != nil {
		return err
	}
	win.ep.lockAll = true
	return nil
}

// UnlockAll completes every operation and releases LockAll.
func (win *Window[T]) UnlockAll() error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if win.freed {
		return ErrFreed
	}
	if !win.ep.lockAll {
		return fmt.Errorf("%w: UnlockAll without LockAll", ErrNotLocked)
	}
	err := win.flushLocked(-1)
	if err == nil {
		err = win.locks.UnlockAll()
	}
	win.ep.lockAll = false
	win.ops = false
	return err
}

// checkGroup is the common check of Post and Start: the window is live and
// group is a valid group of ranks (in range, none twice). It allocates
// nothing; win.mu held.
func (win *Window[T]) checkGroup(group []int) error {
	if win.freed {
		return ErrFreed
	}
	seen := win.inGroup
	var err error
	for _, r := range group {
		if r < 0 || r >= len(seen) || seen[r] {
			err = fmt.Errorf("%w: %v", ErrGroup, group)
			break
		}
		seen[r] = true
	}
	for _, r := range group {
		if r >= 0 && r < len(seen) {
			seen[r] = false
		}
	}
	return err
}

// Post opens an exposure epoch of this rank's window to the ranks in group
// (MPI_Win_post): they may access it after their matching Start, until
// Wait. It tells each of them with one remote atomic.
func (win *Window[T]) Post(group []int, assert Assert) error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if err := win.checkGroup(group); err != nil {
		return err
	}
	if win.ep.exposure {
		return fmt.Errorf("%w: Post while an exposure epoch is open", ErrEpochConflict)
	}
	if win.ep.fence {
		return fmt.Errorf("%w: Post inside a fence epoch", ErrEpochConflict)
	}
	post := win.pscw.Post
	if assert&NoCheck != 0 {
		post = win.pscw.PostNoCheck
	}
	if err := post(group); err != nil {
		return err
	}
	win.ep.exposure = true
	return nil
}

// Start opens an access epoch to the ranks in group (MPI_Win_start); it
// waits until each of them has posted a matching exposure epoch.
func (win *Window[T]) Start(group []int, assert Assert) error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if err := win.checkGroup(group); err != nil {
		return err
	}
	if win.ep.access || win.ep.fence || win.ep.lockAll || win.ep.nlocks > 0 {
		return fmt.Errorf("%w: Start while %s", ErrEpochConflict, cmpOr(win.ep.open(), "a fence epoch is open"))
	}
	start := win.pscw.Start
	if assert&NoCheck != 0 {
		start = win.pscw.StartNoCheck
	}
	if err := start(group); err != nil {
		return err
	}
	win.ep.access = true
	for _, r := range group {
		win.ep.started[r] = true
	}
	return nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// Complete ends the access epoch (MPI_Win_complete): every operation to
// the group is complete at its target, and each target is told with one
// remote atomic ordered after this rank's puts to it.
func (win *Window[T]) Complete() error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if win.freed {
		return ErrFreed
	}
	if !win.ep.access {
		return ErrNotStarted
	}
	// Gets and atomics must be complete here; puts are ordered before the
	// completion atomic by the queue pair.
	var err error
	for r, yes := range win.reads {
		if yes && win.ep.started[r] {
			if e := win.flushLocked(r); e != nil && err == nil {
				err = e
			}
		}
	}
	if err == nil {
		err = win.w.drainStage()
	}
	if err == nil {
		err = win.pscw.Complete()
	}
	win.ep.access = false
	clear(win.ep.started)
	win.ops = false
	win.puts = false
	return err
}

// Wait ends the exposure epoch (MPI_Win_wait): it returns once every rank
// of the posted group has completed its access epoch, and their puts are
// in Local.
func (win *Window[T]) Wait() error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if win.freed {
		return ErrFreed
	}
	if !win.ep.exposure {
		return ErrNotPosted
	}
	if err := win.pscw.Wait(); err != nil {
		return err
	}
	win.ep.exposure = false
	return nil
}

// Test is the non-blocking Wait: it reports whether the exposure epoch has
// ended (and ends it if so).
func (win *Window[T]) Test() (bool, error) {
	win.mu.Lock()
	defer win.mu.Unlock()
	if win.freed {
		return false, ErrFreed
	}
	if !win.ep.exposure {
		return false, ErrNotPosted
	}
	done, err := win.pscw.Test()
	if done && err == nil {
		win.ep.exposure = false
	}
	return done, err
}
