// Package control describes a window's control region: a small registered
// array of 8-byte words on every rank that the passive-target lock protocol
// (sync/lock) drives with remote atomics, so that no message ever needs the
// target's CPU, and where PSCW and fence leave their notes to node-local
// peers (notes.go; other peers get notifications). The target only reads
// its own words, with atomic loads. Layout: docs/sync-protocols.md.
package control

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/rmago/rmago/transport"
)

// Word indices in a control region. Each word is 8 bytes, 8-byte aligned.
const (
	// Lock is the per-target lock word: bit 63 (ExclusiveBit) set while a
	// rank holds the exclusive lock on this rank's window, bits 48-62 then
	// holding the holder's rank + 1; bits 32-47 count lock_all waiters'
	// marks, bits 16-31 exclusive lockers waiting, bits 0-15 shared
	// holders (sync/lock describes the protocol).
	Lock = 0
	// Global is meaningful at the leader (rank 0) only, and only in jobs
	// whose lock protocol keeps lock_all and exclusive locks apart there
	// (sync/lock's leader mode): it counts the holders and waiters of each.
	Global = 1
	// FenceMasks is the first of the fence's put masks (sync/fence's
	// lazy.go), two words per sender s < MaxMaskRanks, alternating
	// between fences: FenceMasks + 2*s + fence parity holds the set of
	// ranks s put into in that fence's epoch (bit r: rank r).
	FenceMasks = 2

	// LockBase is the first of the lock protocol's result words
	// (LockResult).
	LockBase = 16
)

// MaxMaskRanks is the largest job whose fences keep put masks in the
// control words between FenceMasks and LockBase.
const MaxMaskRanks = (LockBase - FenceMasks) / 2

// LockSlotWords is the number of result words per lock target (and for
// lock_all): two for the awaited atomics of a Lock, Unlock or LockAll,
// and one each for the target's and the leader's release atomics that
// Unlock and UnlockAll post without waiting for them.
const LockSlotWords = 4

// LockResult is the first of the LockSlotWords result words where the old
// values of the lock protocol's atomics for target t land (t == size:
// lock_all), in a job of size ranks. Each target has its own words, so
// that locks of different targets may be taken concurrently.
func LockResult(size, t int) int { return LockBase + LockSlotWords*t }

// Words is the length of a control region, in words, for a job of size
// ranks: the lock words, then the direct notes' bell and words (notes.go).
func Words(size int) int { return NoteWord(size, size, 0) }

// ExclusiveBit is the exclusive flag of a Lock word.
const ExclusiveBit = uint64(1) << 63

// Region is one window's control region as a rank sees it: its own words
// (read with Load) and every rank's words (reached with the fabric's
// remote atomics and writes).
type Region struct {
	F     *transport.Fabric
	reg   *transport.Region
	words []uint64 // this rank's words; peers change them through the NIC

	// direct[r]: rank r's words mapped into this process, once asked
	// (Direct); a nil slice when r is reached through requests.
	direct []atomic.Pointer[[]uint64]
}

// Direct returns rank r's control words mapped into this process (a
// node-local peer on the shm provider, whose requests are CPU atomics on
// that very mapping, run inside the post; this rank's own words when its
// requests to itself run so: transport.Fabric.DirectSelf), or nil when r
// is reached through requests. The caller runs sync/atomic operations on them
// instead of posting atomics, after transport.Fabric.DirectReady(r). The
// first call for a rank asks the transport (and may connect to r); the
// answer is kept until Close.
func (c *Region) Direct(r int) []uint64 {
	if p := c.direct[r].Load(); p != nil {
		return *p
	}
	var words []uint64
	if r == c.F.Rank() {
		if c.F.DirectSelf() {
			words = c.words
		}
	} else {
		b := c.F.DirectMapped(r, c.reg.Remote(r, 0))
		if n := len(c.words); len(b) >= 8*n && uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 == 0 {
			words = unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(b))), n)
		}
	}
	c.direct[r].Store(&words)
	return words
}

// Load reads this rank's word i atomically.
func (c *Region) Load(i int) uint64 { return atomic.LoadUint64(&c.words[i]) }

// Store writes this rank's word i atomically (a source for a write to
// peers' words).
func (c *Region) Store(i int, v uint64) { atomic.StoreUint64(&c.words[i], v) }

// LocalAt is the registered address of this rank's word i, for atomics'
// results.
func (c *Region) LocalAt(i int) transport.Local { return c.reg.Local(8 * i) }

// RemoteAt is rank r's word i as an RDMA target.
func (c *Region) RemoteAt(r, i int) transport.Remote { return c.reg.Remote(r, 8*i) }

// New allocates, registers and exchanges a control region: collective over
// the fabric (every rank calls it in the same order). Close releases it.
func New(f *transport.Fabric) (*Region, error) {
	reg, err := f.AllocRegionExchange(Words(f.Size())*8, transport.AllAccess)
	if err != nil {
		return nil, err
	}
	c := &Region{F: f, reg: reg, words: reg.Words(), direct: make([]atomic.Pointer[[]uint64], f.Size())}
	// Map the words of the ranks notified directly now, while every rank
	// takes part: mapping asks the owner for its memory, which a rank
	// stopped later would never answer (a note to it must not wait). The
	// requests to the peers overlap (300 windows created and freed by 8
	// ranks on 2 cores: 6.1 -> 5.5 s; with a core per rank they overlap
	// fully).
	var wg sync.WaitGroup
	for r := range f.Size() {
		if c.DirectNotes(r) {
			wg.Go(func() { c.Direct(r) })
		}
	}
	wg.Wait()
	return c, nil
}

// Close deregisters and frees the region. Call it only when no rank can
// still reach it (after a barrier).
func (c *Region) Close() error {
	c.words = nil
	return c.reg.Close()
}
