package rma

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/rmago/rmago/transport"
)

// LockType is the kind of a passive-target lock.
type LockType uint8

// Lock types.
const (
	// Exclusive: no other rank holds any lock on the target meanwhile.
	Exclusive LockType = iota + 1
	// Shared: other shared holders (and LockAll holders) may overlap.
	Shared
)

func (t LockType) String() string {
	switch t {
	case Exclusive:
		return "Exclusive"
	case Shared:
		return "Shared"
	}
	return fmt.Sprintf("LockType(%d)", uint8(t))
}

// ErrLockType means Lock was given a lock type other than Exclusive and
// Shared (an invalid argument: nothing was locked).
var ErrLockType = errors.New("rma: invalid lock type")

// NoCheck (Lock, LockAll, Post, Start): the program guarantees that no
// conflicting lock is held or requested meanwhile, or that the matching
// Post has already happened; the library skips the protocol's messages.
const NoCheck Assert = 1 << 7

// errf is an error wrapping sentinel that names this rank and window.
func (win *Window[T]) errf(sentinel error, format string, args ...any) error {
	return fmt.Errorf("%w: rank %d, window %d: %s", sentinel, win.w.Rank(), win.id, fmt.Sprintf(format, args...))
}

// wrapf wraps err, a failure of a call on this rank's window, with what
// was being done.
func (win *Window[T]) wrapf(err error, format string, args ...any) error {
	return fmt.Errorf("rma: rank %d, window %d: %s: %w", win.w.Rank(), win.id, fmt.Sprintf(format, args...), err)
}

// liveLocked fails with ErrFreed if the window is freed or being freed;
// win.mu held.
func (win *Window[T]) liveLocked(call string) error {
	if win.freed || win.ep.freeing {
		return win.errf(ErrFreed, "%s on a freed window", call)
	}
	return nil
}

// syncCheck: the window is live and target a rank; win.mu held.
func (win *Window[T]) syncCheck(call string, target int) error {
	if err := win.liveLocked(call); err != nil {
		return err
	}
	if target < 0 || target >= len(win.remotes) {
		return win.errf(ErrRank, "%s(%d) in a job of %d ranks", call, target, len(win.remotes))
	}
	return nil
}

// Fence synchronizes the window collectively (MPI_Win_fence): every
// operation this rank issued since the previous fence is complete when it
// returns (puts are in the targets' memory, gets in the origin slices), and
// every rank's puts into this rank's window are visible in Local. It opens
// the next access epoch, unless assert has NoSucceed. It fails with
// ErrEpochConflict while locks or a PSCW epoch are open. Assertions remove
// work: NoPrecede the flushes (and the second notification round, as no
// rank put); NoPrecede|NoSucceed, which every rank must then give, every
// message (the fence synchronizes nothing). NoStore and NoPut change
// nothing here: rmago keeps no copies of window memory to refresh.
//
// Fence is collective and, unlike the other methods, must not run
// concurrently with other calls on the window: one goroutine per rank
// calls it, after the goroutines that issued operations in the epoch are
// done. Misuse is refused rather than deadlocking: a second goroutine's
// Fence while one runs fails with ErrEpochConflict, and operations issued
// while it runs fail with ErrNoEpoch.
func (win *Window[T]) Fence(assert Assert) error {
	win.mu.Lock()
	defer win.mu.Unlock()
	tr := transition{kind: kindFence, assert: assert}
	if assert&NoSucceed != 0 {
		tr.kind = kindFenceLast
	}
	if err := win.enter(&tr); err != nil {
		return err
	}
	win.flushes = win.flushes[:0]
	if assert&NoPrecede == 0 {
		for r, p := range win.reads {
			if p != 0 {
				win.flushes = append(win.flushes, r)
				win.reads[r] = 0
			}
		}
	}
	win.puts, win.ops = false, false
	win.mu.Unlock()
	var err error
	// NoPrecede and NoSucceed together (given by every rank, as MPI
	// requires of both): the fence neither ends nor starts an epoch with
	// operations, so it synchronizes nothing and sends nothing.
	if assert&(NoPrecede|NoSucceed) != NoPrecede|NoSucceed {
		// Operations cannot start while the fence runs (the state is
		// closing): putTo is read here and cleared below.
		err = win.fence.SyncTo(win.flushes, win.putTo)
	}
	if err == nil {
		err = win.w.drainStage()
	}
	win.mu.Lock()
	clear(win.putTo)
	win.leave(&tr, err == nil)
	if err != nil {
		return win.wrapf(err, "Fence")
	}
	return nil
}

func (w *World) drainStage() error {
	if w.stage.pieces.Load() == 0 {
		// Nothing in flight: pieces this goroutine staged earlier were
		// counted under stageMu before it was released.
		return nil
	}
	w.stageMu.Lock()
	defer w.stageMu.Unlock()
	return w.stage.drain()
}

// completeTo completes every operation this rank issued to target (all
// ranks if target < 0): remote completion, and Get data in place. It waits
// for the fabric, so win.mu must not be held.
func (win *Window[T]) completeTo(target int) error {
	var err error
	if target < 0 {
		err = win.w.f.FlushAll()
	} else {
		err = win.w.f.Flush(target)
	}
	if err == nil {
		err = win.w.drainStage()
	}
	return err
}

// Flush completes, at the target, every operation this rank issued to
// rank target on this window: puts and accumulates are in its memory, gets
// in their origin slices. It belongs in a passive-target epoch covering
// target (Lock(target) or LockAll); rmago also accepts it inside a fence
// or PSCW access epoch to target, where it completes the operations
// early. With no access epoch to target it fails with ErrNoEpoch.
func (win *Window[T]) Flush(target int) error {
	win.mu.Lock()
	if err := win.syncCheck("Flush", target); err != nil {
		win.mu.Unlock()
		return err
	}
	if !win.ep.canAccess(target) {
		win.mu.Unlock()
		return win.errf(ErrNoEpoch, "Flush(%d) outside an access epoch to rank %d: %s", target, target, win.ep.noAccess(target))
	}
	if err := win.settleLazy(target, true); err != nil {
		win.mu.Unlock()
		return win.wrapf(err, "Flush(%d)", target)
	}
	win.reads[target] = 0
	win.mu.Unlock()
	if err := win.completeTo(target); err != nil {
		return win.wrapf(err, "Flush(%d)", target)
	}
	return nil
}

// FlushAll is Flush to every rank. It fails with ErrNoEpoch unless an
// access epoch is open (LockAll, a lock on some rank, a fence or PSCW
// access epoch).
func (win *Window[T]) FlushAll() error {
	win.mu.Lock()
	if err := win.liveLocked("FlushAll"); err != nil {
		win.mu.Unlock()
		return err
	}
	if !win.ep.anyAccess() {
		win.mu.Unlock()
		return win.errf(ErrNoEpoch, "FlushAll outside an access epoch (open one with Lock, LockAll, Fence or Start first)")
	}
	for t := range win.lazy {
		if err := win.settleLazy(t, true); err != nil {
			win.mu.Unlock()
			return win.wrapf(err, "FlushAll")
		}
	}
	clear(win.reads)
	win.mu.Unlock()
	if err := win.completeTo(-1); err != nil {
		return win.wrapf(err, "FlushAll")
	}
	return nil
}

// FlushLocal completes this rank's operations to target locally: origin
// buffers may be reused. On rmago it is Flush (remote completion implies
// local completion, and costs the same round trip), with Flush's checks.
func (win *Window[T]) FlushLocal(target int) error { return win.Flush(target) }

// FlushLocalAll is FlushLocal to every rank (FlushAll).
func (win *Window[T]) FlushLocalAll() error { return win.FlushAll() }

// isFreed reports whether the window is freed or being freed.
func (win *Window[T]) isFreed() bool { return win.gone.Load() }

// Sync synchronizes this rank's view of its own window memory with the
// changes peers made through the fabric (MPI_Win_sync): after it, plain
// reads of Local see every change whose completion this rank has learned
// of by synchronization (a flag read with LoadLocal, say).
func (win *Window[T]) Sync() error {
	if win.isFreed() {
		return win.errf(ErrFreed, "Sync on a freed window")
	}
	win.w.f.SyncMemory()
	return nil
}

// LoadLocal reads element i of this rank's own window atomically, for
// polling a flag that peers set with an atomic (Accumulate with Replace,
// FetchAndOp, CompareAndSwap; not a plain Put, see docs/memory-model.md).
// Peers' changes become visible to it without any synchronization call;
// AwaitLocal is the blocking form.
func (win *Window[T]) LoadLocal(i int) T {
	p := unsafe.Pointer(&win.local[i])
	if win.esize == 8 {
		return fromBits[T](atomic.LoadUint64((*uint64)(p)))
	}
	// The aligned 8-byte word holding the element, which peers' atomics
	// update as a whole; at an edge of a created window it reaches past the
	// slice, but never past the page (an aligned word cannot cross one).
	sh := int(uintptr(p) & 7)
	w := atomic.LoadUint64((*uint64)(unsafe.Add(p, -sh)))
	return elemAt[T](w, uint(sh))
}

// AwaitLocal blocks until cond holds for element i of this rank's own window
// (read with LoadLocal), for a flag or counter that peers change through the
// fabric. Between checks it drives the fabric itself (with the soft provider
// it runs the peers' requests as they arrive, so the update lands without
// waking another goroutine); once nothing has arrived for a while it sleeps
// between checks. Once it returns, plain reads of Local see what the peer
// published before its atomic made cond true (the load that saw it is an
// acquire; no Sync is needed). It fails with an error wrapping ErrTimeout
// after the World's Timeout (RMAGO_TIMEOUT). Prefer it to a loop of your own,
// which would leave the soft provider's progress to a goroutine woken for
// every message.
func (win *Window[T]) AwaitLocal(i int, cond func(T) bool) error {
	if win.isFreed() {
		return win.errf(ErrFreed, "AwaitLocal on a freed window")
	}
	if i < 0 || i >= len(win.local) {
		return win.errf(ErrRange, "AwaitLocal(%d) on a window of %d elements", i, len(win.local))
	}
	lw := win.w.f.NewPoller()
	defer lw.Done()
	for {
		if cond(win.LoadLocal(i)) {
			// The atomic load that saw the condition is the acquire: the
			// peer's atomic that made it true (Accumulate, FetchAndOp,
			// CompareAndSwap, all through the provider's atomics) came after
			// the data it publishes, so plain reads of that data need no
			// Sync. A full fence here cost 20 ns of each shm lock_all leg.
			return nil
		}
		if !lw.Pause() {
			return win.wrapf(transport.ErrTimeout, "AwaitLocal(%d): the condition did not hold after %v", i, win.w.f.Timeout())
		}
	}
}

// Lock opens a passive-target access epoch to rank target (MPI_Win_lock):
// Exclusive excludes every other lock on target, Shared only exclusive
// ones. The target takes no part. Locks on several targets may be held at
// once. It fails with ErrEpochConflict inside a fence or PSCW access epoch
// and with ErrLockType for a type other than Exclusive and Shared.
//
// The epoch is the rank's, not the goroutine's: once Lock returns, every
// goroutine of the rank may access target until Unlock. A Lock of a target
// the rank already locks or holds (another goroutine's Lock), or while it
// holds LockAll, waits until that is released, as a mutex would, so that
// goroutines can each lock, access and unlock a target; the wait is
// bounded by the fabric's timeout (then the error wraps
// transport.ErrTimeout). A goroutine that locks a target twice without
// unlocking in between therefore waits for the timeout.
//
// A lock may be taken lazily, as MPI allows (MPICH does): where the target is
// reached through the soft provider (for an exclusive lock: and this rank or
// the target is rank 0, the lock leader), Lock sends nothing and returns at
// once, and the lock is taken with the epoch's first operation: a Put or Get
// of up to 16 KiB from or into a window's memory carries the lock's atomics, a
// Put landing only if they found the lock free (else it is made again once the
// lock is held, as is a Get); any other operation, Flush or Unlock first waits
// for the lock. Lock, Put (or Get) and Flush then take one round trip. An
// epoch with no operation takes nothing, so a lock without operations excludes
// nothing: to use a lock as a mutex, access the target under it.
func (win *Window[T]) Lock(target int, typ LockType, assert Assert) error {
	if typ != Exclusive && typ != Shared {
		return win.errf(ErrLockType, "Lock(%d, %v): use rma.Exclusive or rma.Shared", target, typ)
	}
	if err := win.lockSettled("Lock"); err != nil {
		return err
	}
	defer win.mu.Unlock()
	if err := win.syncCheck("Lock", target); err != nil {
		return err
	}
	tr := transition{kind: kindLockShared, target: target, assert: assert}
	if typ == Exclusive {
		tr.kind = kindLockExcl
	}
	if assert&NoCheck == 0 && win.lockDirect(target, tr.kind) {
		return nil
	}
	if err := win.enter(&tr); err != nil {
		return err
	}
	var err error
	switch {
	case assert&NoCheck != 0:
	case win.locks.TryDirect(target, typ == Exclusive):
		// A node-local target's free lock, taken with one CPU atomic
		// without letting go of win.mu. Tried first: it applies only
		// where every rank is on shm, where no lock is lazy.
	case win.locks.Lazy(target, typ == Exclusive):
		// Taken lazily (lazy.go): nothing is sent before the epoch's first
		// use, but a peer already known to have failed fails it now.
		if err = win.w.f.Err(target); err == nil {
			// The target's slot is free: the last epoch on it
			// ended, and with it every use of its lazy lock.
			lz := &win.lazyMem[target]
			*lz = lazyLock{p: win.locks.Begin(target, typ == Exclusive)}
			win.lazy[target] = lz
		}
	default:
		win.mu.Unlock()
		err = win.locks.Lock(target, typ == Exclusive)
		win.mu.Lock()
	}
	win.leave(&tr, err == nil)
	if err != nil {
		return win.wrapf(err, "Lock(%d, %v)", target, typ)
	}
	return nil
}

// Unlock completes every operation this rank issued to target (as Flush)
// and releases the lock (MPI_Win_unlock), whichever goroutine took it.
// ErrNotLocked if the rank holds no lock on target (or its Lock has not
// returned, or another goroutine is unlocking it). Operations to target
// that other goroutines issue while Unlock runs are refused (ErrNoEpoch);
// accumulates already running finish first.
func (win *Window[T]) Unlock(target int) error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if err := win.syncCheck("Unlock", target); err != nil {
		return err
	}
	if win.unlockDirect(target) {
		return nil
	}
	if win.lazyAt(target) != nil {
		return win.unlockLazy(target)
	}
	return win.unlockHeld(target)
}

// unlockHeld is Unlock of a lock that is not an unconfirmed lazy one;
// win.mu held (released while it waits).
func (win *Window[T]) unlockHeld(target int) error {
	tr := transition{kind: kindUnlock, target: target}
	if err := win.enter(&tr); err != nil {
		return err
	}
	// The release atomic follows this rank's puts to target down the same
	// queue pair, which executes them in order, and its completion (which
	// Unlock waits for) implies theirs: puts need no separate flush round
	// trip. Reads do: a read's data may still be on its way (IB orders
	// them before later requests only with a fence; soft's answer takes
	// it from memory when it is sent), and a writer let in by the release
	// would tear it. So do accumulates and atomics, unless the target's
	// provider executes them in order and at once (AtomicsInOrder: soft,
	// shm): a NIC may execute the release first. A NoCheck lock has no
	// atomic to wait for.
	noCheck := win.ep.noCheck[target]
	p := win.reads[target]
	flush := noCheck || p&pendingReads != 0 || p&pendingAtomics != 0 && !win.w.f.AtomicsInOrder(target)
	win.reads[target] = 0
	if !noCheck && !win.w.f.Outstanding(target) && win.w.stage.pieces.Load() == 0 &&
		win.locks.UnlockDirect(target, tr.from == openExcl) {
		// Everything issued to target has completed (a node-local
		// target's requests complete at post): the release is one CPU
		// atomic, made without letting go of win.mu.
		win.leave(&tr, true)
		win.ops = win.ep.nlocks > 0 && win.ops
		return nil
	}
	win.mu.Unlock()
	var err error
	if flush {
		err = win.w.f.Flush(target)
	}
	if err == nil && !noCheck {
		err = win.locks.Unlock(target, tr.from == openExcl)
	}
	if err == nil {
		err = win.w.drainStage()
	}
	win.mu.Lock()
	win.leave(&tr, err == nil)
	win.ops = win.ep.nlocks > 0 && win.ops
	if err != nil {
		return win.wrapf(err, "Unlock(%d)", target)
	}
	return nil
}

// LockAll opens a shared passive-target epoch to every rank
// (MPI_Win_lock_all): one remote atomic at rank 0 in a job that spans a
// network, whatever its size; on one node's shared memory, a CPU atomic
// on every rank's lock word (docs/sync-protocols.md). Like
// Lock, it is the rank's epoch: while another goroutine holds (or takes)
// LockAll or a lock on any rank, it waits until they are released, bounded
// by the fabric's timeout.
func (win *Window[T]) LockAll(assert Assert) error {
	if err := win.lockSettled("LockAll"); err != nil {
		return err
	}
	defer win.mu.Unlock()
	tr := transition{kind: kindLockAll, assert: assert}
	if err := win.enter(&tr); err != nil {
		return err
	}
	var err error
	if assert&NoCheck == 0 {
		win.mu.Unlock()
		err = win.locks.LockAll()
		win.mu.Lock()
	}
	win.leave(&tr, err == nil)
	if err != nil {
		return win.wrapf(err, "LockAll")
	}
	return nil
}

// UnlockAll completes every operation and releases LockAll, whichever
// goroutine took it. ErrNotLocked if LockAll is not held.
func (win *Window[T]) UnlockAll() error {
	win.mu.Lock()
	defer win.mu.Unlock()
	tr := transition{kind: kindUnlockAll}
	if err := win.enter(&tr); err != nil {
		return err
	}
	noCheck := win.ep.noCheck[len(win.ep.lock)]
	clear(win.reads)
	win.mu.Unlock()
	err := win.completeTo(-1)
	if err == nil && !noCheck {
		err = win.locks.UnlockAll()
	}
	win.mu.Lock()
	win.leave(&tr, err == nil)
	win.ops = false
	if err != nil {
		return win.wrapf(err, "UnlockAll")
	}
	return nil
}

// checkGroup is the common check of Post and Start: the window is live and
// group is a valid group of ranks (in range, none twice). It allocates
// nothing; win.mu held.
func (win *Window[T]) checkGroup(call string, group []int) error {
	if err := win.liveLocked(call); err != nil {
		return err
	}
	seen := win.inGroup
	bad := false
	for _, r := range group {
		if r < 0 || r >= len(seen) || seen[r] {
			bad = true
			break
		}
		seen[r] = true
	}
	for _, r := range group {
		if r >= 0 && r < len(seen) {
			seen[r] = false
		}
	}
	if bad {
		return win.errf(ErrGroup, "%s(%v): ranks must be in [0, %d), each at most once", call, group, len(seen))
	}
	return nil
}

// Post opens an exposure epoch of this rank's window to the ranks in group
// (MPI_Win_post): they may access it after their matching Start, until
// Wait. It tells each of them with one notification. The window has one
// exposure epoch at a time: a Post while another goroutine's exposure
// epoch is open waits until Wait (or Test) ends it, bounded by the
// fabric's timeout. It fails with ErrEpochConflict inside a fence epoch.
func (win *Window[T]) Post(group []int, assert Assert) error {
	win.mu.Lock()
	defer win.mu.Unlock()
	if err := win.checkGroup("Post", group); err != nil {
		return err
	}
	tr := transition{kind: kindPost, group: group, assert: assert}
	if err := win.enter(&tr); err != nil {
		return err
	}
	p := win.pscw
	win.mu.Unlock()
	var err error
	if assert&NoCheck != 0 {
		err = p.PostNoCheck(group)
	} else {
		err = p.Post(group)
	}
	win.mu.Lock()
	win.leave(&tr, err == nil)
	if err != nil {
		return win.wrapf(err, "Post(%v)", group)
	}
	return nil
}

// Start opens an access epoch to the ranks in group (MPI_Win_start); it
// waits until each of them has posted a matching exposure epoch. The
// window has one access epoch at a time: a Start while another goroutine's
// access epoch is open (or starting) waits until Complete ends it; both
// waits are bounded by the fabric's timeout. It fails with
// ErrEpochConflict inside a fence or passive-target epoch.
func (win *Window[T]) Start(group []int, assert Assert) error {
	if err := win.lockSettled("Start"); err != nil {
		return err
	}
	defer win.mu.Unlock()
	if err := win.checkGroup("Start", group); err != nil {
		return err
	}
	tr := transition{kind: kindStart, group: group, assert: assert}
	if err := win.enter(&tr); err != nil {
		return err
	}
	p := win.pscw
	win.mu.Unlock()
	var err error
	if assert&NoCheck != 0 {
		err = p.StartNoCheck(group)
	} else {
		err = p.Start(group)
	}
	win.mu.Lock()
	win.leave(&tr, err == nil)
	if err != nil {
		return win.wrapf(err, "Start(%v)", group)
	}
	return nil
}

// Complete ends the access epoch (MPI_Win_complete), whichever goroutine
// started it: every operation to the group is complete at its target, and
// each target is told with one notification ordered after this rank's
// puts to it. On the soft provider that notification may wait to leave
// with this rank's next request (the next Post's notification, in one
// write) or its next wait, and otherwise leaves when the provider's timer
// fires (200 µs, a millisecond or more once the program computes); a
// program that leaves one behind so has its next ones sent at once for a
// while, and with more ranks than cores none waits (verbs/soft/hold.go).
// Operations that other goroutines issue while it runs are refused
// (ErrNoEpoch); accumulates already running finish first.
func (win *Window[T]) Complete() error {
	win.mu.Lock()
	defer win.mu.Unlock()
	tr := transition{kind: kindComplete}
	if err := win.enter(&tr); err != nil {
		return err
	}
	// Gets and atomics must be complete here; puts are ordered before the
	// completion notification by the queue pair.
	win.cflush = win.cflush[:0]
	for r, p := range win.reads {
		if p != 0 && win.ep.started[r] {
			win.cflush = append(win.cflush, r)
			win.reads[r] = 0
		}
	}
	p := win.pscw
	// Reads to a rank whose provider orders them before a notification
	// (ReadsBeforeRecv) complete after the completion notification is
	// posted, the waits overlapping (the notification, signalled, is the
	// flush); the others before it.
	f := win.w.f
	win.cafter = win.cafter[:0]
	n := 0
	for _, r := range win.cflush {
		if r != f.Rank() && f.ReadsBeforeRecv(r) {
			win.cafter = append(win.cafter, r)
		} else {
			win.cflush[n] = r
			n++
		}
	}
	win.cflush = win.cflush[:n]
	win.mu.Unlock()
	err := f.FlushRanks(win.cflush)
	if err == nil {
		// The notifications to cafter are signalled: the flush below waits
		// for them.
		err = p.CompleteFlushing(win.cafter)
	} else {
		f.PostFlushes(win.cafter)
	}
	if ferr := f.FlushRanks(win.cafter); err == nil {
		err = ferr
	}
	if err == nil {
		err = win.w.drainStage()
	}
	win.mu.Lock()
	win.leave(&tr, err == nil)
	win.ops = false
	win.puts = false
	if err != nil {
		return win.wrapf(err, "Complete")
	}
	return nil
}

// Wait ends the exposure epoch (MPI_Win_wait), whichever goroutine posted
// it: it returns once every rank of the posted group has completed its
// access epoch, and their puts are in Local. It waits without blocking the
// window's other calls (another goroutine's Start, Complete or
// operations). ErrNotPosted without an open exposure epoch, or while
// another goroutine's Post has not returned or its Wait is running. A Wait
// that fails (times out) leaves the epoch open.
func (win *Window[T]) Wait() error {
	win.mu.Lock()
	defer win.mu.Unlock()
	tr := transition{kind: kindWait}
	if err := win.enter(&tr); err != nil {
		return err
	}
	p := win.pscw
	win.mu.Unlock()
	err := p.Wait()
	win.mu.Lock()
	win.leave(&tr, err == nil)
	if err != nil {
		return win.wrapf(err, "Wait")
	}
	return nil
}

// Test is the non-blocking Wait: it reports whether the exposure epoch has
// ended (and ends it if so). While another goroutine's Wait is running it
// reports false: that Wait ends the epoch.
func (win *Window[T]) Test() (bool, error) {
	win.mu.Lock()
	defer win.mu.Unlock()
	if win.ep.exposure == closing && !win.freed && !win.ep.freeing {
		return false, nil
	}
	tr := transition{kind: kindTest}
	if err := win.enter(&tr); err != nil {
		return false, err
	}
	// pscw.Test does not wait: it checks local words and polls the fabric
	// once, so it runs under win.mu.
	done, err := win.pscw.Test()
	win.leave(&tr, err == nil && done)
	if err != nil {
		return false, win.wrapf(err, "Test")
	}
	return done, nil
}
