package transport

import (
	"errors"
	"fmt"

	"github.com/rmago/rmago/verbs"
)

// ErrNotShared means a peer's memory cannot be mapped into this process:
// the peer is not on this node, the job reaches it through a network
// provider, or the memory is not in shared memory (a created window). It
// also matches verbs.ErrNotMappable.
var ErrNotShared = fmt.Errorf("transport: memory not shared with this process (%w)", verbs.ErrNotMappable)

// SharesMemory reports whether this rank's provider can map node-local
// peers' registered memory into the process (verbs.Mapper: the shm
// provider). Today a job runs one provider for every rank.
func (f *Fabric) SharesMemory() bool {
	p := f.peers[f.rank].Load()
	if p == nil {
		return false
	}
	_, ok := p.qp.(verbs.Mapper)
	return ok
}

// Mapped returns rank r's copy of the region (after Exchange) mapped into
// this process for plain loads and stores, from its first byte to its end;
// this rank's own is Bytes. See Fabric.Mapped.
func (g *Region) Mapped(r int) ([]byte, error) {
	if r == g.f.rank {
		return g.b, nil
	}
	if r < 0 || r >= g.f.size || g.peers == nil {
		return nil, fmt.Errorf("transport: mapping rank %d's region: rank out of range [0,%d) or region not exchanged", r, g.f.size)
	}
	return g.f.Mapped(r, g.peers[r])
}

// Mapped returns rank r's registered memory at rem, to the end of its
// region, mapped into this process for plain loads and stores. It connects
// to r if needed. It fails with ErrNotShared when r's memory cannot be
// mapped (another node, a network provider, memory not in shared memory),
// and with ErrRemoteAccess when r has no such region (closed). The bytes
// stay valid until r closes the region or this fabric is closed.
func (f *Fabric) Mapped(r int, rem Remote) ([]byte, error) {
	if r < 0 || r >= f.size {
		return nil, fmt.Errorf("transport: mapping rank %d's memory: rank out of range [0,%d)", r, f.size)
	}
	p, err := f.peerOf(r)
	if err != nil {
		return nil, err
	}
	m, ok := p.qp.(verbs.Mapper)
	if !ok {
		return nil, fmt.Errorf("%w: rank %d is reached through a provider that cannot map its memory (not shm)", ErrNotShared, r)
	}
	b, err := m.MapRemote(rem.RKey, rem.Addr)
	switch {
	case err == nil:
		return b, nil
	case errors.Is(err, verbs.ErrNotMappable):
		return nil, fmt.Errorf("%w: rank %d: %w", ErrNotShared, r, err)
	case errors.Is(err, verbs.ErrQPState):
		return nil, rankErr(r, fmt.Errorf("mapping its memory: %w", err))
	}
	return nil, fmt.Errorf("transport: mapping rank %d's memory: %w", r, err)
}

// Unmap removes this process's mapping of rank r's region rkey, and of
// r's regions closed since they were mapped (verbs.Mapper.Unmap), if r
// was ever connected: a window's Free calls it, so that no mapping of a
// peer's freed memory, or of a killed peer's, outlives the window. Slices
// Mapped returned for them must not be used after.
func (f *Fabric) Unmap(r int, rkey uint32) {
	if r < 0 || r >= f.size {
		return
	}
	if p := f.peers[r].Load(); p != nil {
		if m, ok := p.qp.(verbs.Mapper); ok {
			m.Unmap(rkey)
		}
	}
}
