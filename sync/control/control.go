// Package control describes a window's control region: a small registered
// array of 8-byte words on every rank that the synchronization protocols
// (sync/lock, sync/pscw) drive with remote atomics and writes, so that no
// message ever needs the target's CPU. The target only reads its own words,
// with atomic loads.
package control

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"

	"github.com/rmago/rmago/transport"
	"github.com/rmago/rmago/verbs"
)

const verbsAccessAll = verbs.AccessAll

// Word indices in a control region. Each word is 8 bytes, 8-byte aligned.
const (
	// Lock is the per-target lock word: bit 63 (ExclusiveBit) set while a
	// rank holds the exclusive lock on this rank's window, bits 40-62 then
	// holding the holder's rank + 1; bits 20-39 count exclusive lockers
	// waiting for it; bits 0-19 count shared holders (sync/lock describes
	// the protocol).
	Lock = 0
	// Global is meaningful at the leader (rank 0) only: it keeps lock_all
	// and exclusive locks apart without touching every rank, counting the
	// holders and waiters of each (sync/lock describes its fields).
	Global = 1
	// Complete is no longer used: PSCW counts completions per origin
	// (CompleteFrom), so that a wait that times out can name the ranks
	// that did not complete.
	Complete = 2
	// Scratch is the first of ScratchWords words where the results of this
	// rank's own remote atomics land (old values of fetch-add and
	// compare-swap). A protocol uses them under its own lock. (sync/lock
	// has its own result words: LockResult.)
	Scratch      = 8
	ScratchWords = 8
	// PostBase + r counts the exposure epochs rank r posted to this rank
	// (PSCW): rank r adds 1 here when it posts a group containing this rank.
	PostBase = Scratch + ScratchWords
)

// LockResult is the first of the two result words where the old values
// of the lock protocol's atomics for target t land (t == size: lock_all),
// in a job of size ranks. Each target has its own pair, so that locks of
// different targets may be taken concurrently.
func LockResult(size, t int) int { return PostBase + size + 2*t }

// CompleteFrom is the word that counts the PSCW access epochs rank r
// completed toward this rank (r adds 1 when it completes), in a job of
// size ranks.
func CompleteFrom(size, r int) int { return LockResult(size, size+1) + r }

// Words is the length of a control region, in words, for a job of size ranks.
func Words(size int) int { return CompleteFrom(size, size) }

// ExclusiveBit is the exclusive flag of a Lock word.
const ExclusiveBit = uint64(1) << 63

// Region is one window's control region as a rank sees it: its own words
// (read with Load) and every rank's words (reached with the fabric's
// remote atomics and writes).
type Region struct {
	F      *transport.Fabric
	Local  []uint64           // this rank's words; peers change them through the NIC
	LMR    transport.Local    // Local[0]'s address and lkey
	Remote []transport.Remote // rank r's Local[0] as an RDMA target

	mem *transport.Memory
	mr  verbs.MR
}

// Load reads this rank's word i atomically.
func (c *Region) Load(i int) uint64 { return atomic.LoadUint64(&c.Local[i]) }

// LocalAt is the registered address of this rank's word i, for atomics'
// results.
func (c *Region) LocalAt(i int) transport.Local {
	return transport.Local{Addr: c.LMR.Addr + uint64(i)*8, LKey: c.LMR.LKey}
}

// RemoteAt is rank r's word i as an RDMA target.
func (c *Region) RemoteAt(r, i int) transport.Remote {
	return transport.Remote{Addr: c.Remote[r].Addr + uint64(i)*8, RKey: c.Remote[r].RKey}
}

// FetchAdd adds v to rank r's word i and returns the old value. It waits for
// the result. scratch selects the landing word (Scratch+k).
func (c *Region) FetchAdd(r, i int, v uint64, scratch int) (uint64, error) {
	seq, err := c.F.FetchAdd(r, c.LocalAt(scratch), c.RemoteAt(r, i), v)
	if err != nil {
		return 0, err
	}
	if err := c.F.Wait(r, seq); err != nil {
		return 0, err
	}
	return c.Load(scratch), nil
}

// CompareSwap sets rank r's word i to swap if it equals compare, and returns
// the old value. It waits for the result.
func (c *Region) CompareSwap(r, i int, compare, swap uint64, scratch int) (uint64, error) {
	seq, err := c.F.CompareSwap(r, c.LocalAt(scratch), c.RemoteAt(r, i), compare, swap)
	if err != nil {
		return 0, err
	}
	if err := c.F.Wait(r, seq); err != nil {
		return 0, err
	}
	return c.Load(scratch), nil
}

// AddNoWait adds v to rank r's word i without waiting for the result (the
// old value lands in the scratch word); the addition is ordered after every
// request this rank posted to r before it.
func (c *Region) AddNoWait(r, i int, v uint64, scratch int) error {
	_, err := c.F.FetchAdd(r, c.LocalAt(scratch), c.RemoteAt(r, i), v)
	return err
}

// Words8 views n words of memory starting at p.
func Words8(p unsafe.Pointer, n int) []uint64 { return unsafe.Slice((*uint64)(p), n) }

// New allocates, registers and exchanges a control region: collective over
// the fabric (every rank calls it in the same order). Close releases it.
func New(f *transport.Fabric) (*Region, error) {
	n := Words(f.Size())
	mem, err := transport.AllocMemory(n * 8)
	if err != nil {
		return nil, err
	}
	mr, err := f.PD().RegMR(mem.Bytes(), verbsAccessAll)
	if err != nil {
		mem.Free()
		return nil, err
	}
	var desc [12]byte
	binary.LittleEndian.PutUint64(desc[0:], mr.Addr())
	binary.LittleEndian.PutUint32(desc[8:], mr.RKey())
	all := make([][]byte, f.Size())
	for r := range all {
		all[r] = make([]byte, len(desc))
	}
	if err := f.Allgather(desc[:], all); err != nil {
		mr.Dereg()
		mem.Free()
		return nil, err
	}
	c := &Region{F: f, Local: Words8(mem.Ptr(), n), LMR: transport.Local{Addr: mr.Addr(), LKey: mr.LKey()}, mem: mem, mr: mr}
	for _, d := range all {
		c.Remote = append(c.Remote, transport.Remote{Addr: binary.LittleEndian.Uint64(d[0:]), RKey: binary.LittleEndian.Uint32(d[8:])})
	}
	return c, nil
}

// Close deregisters and frees the region. Call it only when no rank can
// still reach it (after a barrier).
func (c *Region) Close() error {
	if c.mr == nil {
		return nil
	}
	err := c.mr.Dereg()
	c.mem.Free()
	c.mr, c.Local = nil, nil
	return err
}
