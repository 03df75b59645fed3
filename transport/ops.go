package transport

import (
	"fmt"

	"github.com/rmago/rmago/verbs"
)

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

// The one-sided operations below build their work request in storage the
// peer owns, under its post lock, so that posting allocates nothing. Each
// returns the request's sequence number for Wait.

// Write posts an RDMA write of n bytes from local to remote at rank r.
func (f *Fabric) Write(r int, local Local, remote Remote, n uint32) (uint64, error) {
	return f.post(r, verbs.OpWrite, 0, local, n, remote, 0, 0)
}

// Read posts an RDMA read of n bytes from remote at rank r into local.
func (f *Fabric) Read(r int, local Local, remote Remote, n uint32) (uint64, error) {
	return f.post(r, verbs.OpRead, 0, local, n, remote, 0, 0)
}

// post posts one request, built in p.wr, to rank r.
func (f *Fabric) post(r int, op verbs.Opcode, flags verbs.SendFlags, local Local, n uint32, remote Remote, arg0, arg1 uint64) (uint64, error) {
	p, err := f.peerOf(r)
	if err != nil {
		return 0, fmt.Errorf("posting a %v to rank %d: %w", op, r, err)
	}
	p.postMu.Lock()
	defer p.postMu.Unlock()
	p.sge[0] = verbs.SGE{Addr: local.Addr, Length: n, LKey: local.LKey}
	p.wr = verbs.SendWR{Op: op, Flags: flags, SGL: p.sge[:1], RemoteAddr: remote.Addr, RKey: remote.RKey, CompareAdd: arg0, Swap: arg1}
	if n == 0 {
		p.wr.SGL = nil
	}
	return f.postLocked(p, &p.wr)
}
