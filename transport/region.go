package transport

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/rmago/rmago/internal/memfd"
	"github.com/rmago/rmago/verbs"
)

// Memory is page-aligned memory outside the Go heap (a memfd mapped
// shared, internal/memfd), for allocated windows: it never moves, the
// garbage collector never scans it, and node-local peers can map it (the
// shm provider).
type Memory struct {
	m *memfd.Mem
}

// AllocMemory maps n bytes (rounded up to pages) of zeroed memory.
func AllocMemory(n int) (*Memory, error) {
	if n <= 0 {
		return nil, fmt.Errorf("transport: allocating %d bytes", n)
	}
	m, err := memfd.Alloc(n, "rmago")
	if err != nil {
		return nil, fmt.Errorf("transport: %w", err)
	}
	return &Memory{m: m}, nil
}

// Bytes is the memory.
func (m *Memory) Bytes() []byte {
	if m.m == nil {
		return nil
	}
	return m.m.Bytes()
}

// Ptr is the address of the first byte.
func (m *Memory) Ptr() unsafe.Pointer { return unsafe.Pointer(unsafe.SliceData(m.Bytes())) }

// Free unmaps the memory; it must be deregistered first.
func (m *Memory) Free() error {
	if m.m == nil {
		return nil
	}
	mm := m.m
	m.m = nil
	return mm.Free()
}

// Local is registered memory of this rank: an address and its lkey.
type Local struct {
	Addr uint64
	LKey uint32
}

// Remote is registered memory of a peer: an address and its rkey.
type Remote struct {
	Addr uint64
	RKey uint32
}

// Access is what a Region allows: its local use by the requests of this
// rank, and what peers may do to it.
type Access uint8

const (
	// LocalOnly: results of this rank's reads and atomics land in it;
	// peers cannot reach it.
	LocalOnly Access = iota
	// PutGet: peers may write and read it, not run atomics on it.
	PutGet
	// AtomicsOnly: peers may run atomics on it, not write or read it.
	AtomicsOnly
	// AllAccess: peers may write, read and run atomics on it.
	AllAccess
)

func (a Access) verbs() verbs.Access {
	switch a {
	case PutGet:
		return verbs.AccessLocalWrite | verbs.AccessRemoteWrite | verbs.AccessRemoteRead
	case AtomicsOnly:
		return verbs.AccessLocalWrite | verbs.AccessRemoteAtomic
	case AllAccess:
		return verbs.AccessAll
	}
	return verbs.AccessLocalWrite
}

// Region is memory registered with the fabric: this rank's requests use it
// through Local, and, once the region was exchanged (collective regions),
// peers' copies of it are reached through Remote. It is the one way memory
// is registered above the verbs layer. In a fabric with several provider
// contexts (contexts.go) it is registered on each: Local carries a handle
// the fabric translates when posting (keys.go), Remote the key of the
// context that serves the peer.
type Region struct {
	f      *Fabric
	b      []byte
	mem    *Memory // the region's own memory (AllocRegion), else nil
	mrs    []verbs.MR
	keys   Keys  // rkey on each context
	loc    Local // byte 0 for this rank's requests
	handle bool  // loc.LKey is a handle (keys.go)
	acc    Access
	peers  []Remote // every rank's region, after Exchange
}

// Register registers b, which the caller owns and keeps from moving (Go
// memory must be pinned) until Close.
func (f *Fabric) Register(b []byte, acc Access) (*Region, error) {
	g := &Region{f: f, b: b, acc: acc}
	var lkeys keySet
	for i, c := range f.ctxs {
		mr, err := c.pd.RegMR(b, acc.verbs())
		if err != nil {
			g.Close()
			return nil, err
		}
		g.mrs = append(g.mrs, mr)
		g.keys[i], lkeys[i] = mr.RKey(), mr.LKey()
	}
	g.loc = Local{Addr: g.mrs[0].Addr(), LKey: lkeys[0]}
	if f.multi {
		g.loc.LKey, g.handle = f.newHandle(lkeys), true
	}
	return g, nil
}

// AllocRegion allocates n bytes of zeroed memory outside the Go heap
// (AllocMemory) and registers them; Close frees them.
func (f *Fabric) AllocRegion(n int, acc Access) (*Region, error) {
	mem, err := AllocMemory(n)
	if err != nil {
		return nil, err
	}
	g, err := f.Register(mem.Bytes(), acc)
	if err != nil {
		mem.Free()
		return nil, err
	}
	g.mem = mem
	return g, nil
}

// AllocRegionExchange is AllocRegion followed by Exchange: collective.
func (f *Fabric) AllocRegionExchange(n int, acc Access) (*Region, error) {
	g, err := f.AllocRegion(n, acc)
	if err != nil {
		return nil, err
	}
	if err := g.Exchange(); err != nil {
		g.Close()
		return nil, err
	}
	return g, nil
}

// regionDesc is the bytes of a region's address and keys in Exchange.
const regionDesc = 8 + 4*MaxContexts

// Exchange tells every rank this region's address and keys and learns
// theirs (an allgather): collective, every rank calls it for its regions
// in the same order. Remote then reaches any rank's region.
func (g *Region) Exchange() error {
	var desc [regionDesc]byte
	binary.LittleEndian.PutUint64(desc[0:], g.loc.Addr)
	for i, k := range g.keys {
		binary.LittleEndian.PutUint32(desc[8+4*i:], k)
	}
	all := make([][]byte, g.f.size)
	for r := range all {
		all[r] = make([]byte, regionDesc)
	}
	if err := g.f.Allgather(desc[:], all); err != nil {
		return err
	}
	g.peers = make([]Remote, g.f.size)
	for r, d := range all {
		ci := int(g.f.via[r])
		g.peers[r] = Remote{Addr: binary.LittleEndian.Uint64(d[0:]), RKey: binary.LittleEndian.Uint32(d[8+4*ci:])}
	}
	return nil
}

// Bytes is the registered memory.
func (g *Region) Bytes() []byte { return g.b }

// Len is the registered length in bytes.
func (g *Region) Len() int { return len(g.b) }

// Access is what the region allows.
func (g *Region) Access() Access { return g.acc }

// Words is the registered memory as 8-byte words (its length rounded
// down); the memory must be 8-byte aligned, as AllocRegion's is.
func (g *Region) Words() []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(g.b))), len(g.b)/8)
}

// Local is this rank's byte off of the region, for its own requests.
func (g *Region) Local(off int) Local {
	return Local{Addr: g.loc.Addr + uint64(off), LKey: g.loc.LKey}
}

// Self is this rank's byte off of the region as the peers served by the
// fabric's first context reach it, for descriptors a caller exchanges
// itself; with several contexts publish Keys, which every peer resolves
// with Fabric.KeyOf.
func (g *Region) Self(off int) Remote {
	return Remote{Addr: g.loc.Addr + uint64(off), RKey: g.keys[0]}
}

// Keys is the region's remote key on each of the fabric's contexts.
func (g *Region) Keys() Keys { return g.keys }

// MROf is the region's registration on the context that serves rank r.
func (g *Region) MROf(r int) verbs.MR { return g.mrs[g.f.via[r]] }

// Remote is rank r's byte off of the region (after Exchange).
func (g *Region) Remote(r, off int) Remote {
	return Remote{Addr: g.peers[r].Addr + uint64(off), RKey: g.peers[r].RKey}
}

// Close deregisters the region and frees its memory if it allocated it.
// Call it only once no rank can still reach it (after a barrier, or
// Disconnect). A second call does nothing.
func (g *Region) Close() error {
	if g == nil || g.mrs == nil {
		return nil
	}
	var err error
	for _, mr := range g.mrs {
		err = errors.Join(err, mr.Dereg())
	}
	if g.handle {
		g.f.dropHandle(g.loc.LKey)
	}
	if g.mem != nil {
		err = errors.Join(err, g.mem.Free())
	}
	g.mrs, g.mem, g.b, g.peers = nil, nil, nil, nil
	return err
}
