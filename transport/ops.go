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
	return f.post(r, verbs.OpWrite, local, n, remote, 0, 0)
}

// Read posts an RDMA read of n bytes from remote at rank r into local.
func (f *Fabric) Read(r int, local Local, remote Remote, n uint32) (uint64, error) {
	return f.post(r, verbs.OpRead, local, n, remote, 0, 0)
}

// FetchAdd posts an 8-byte atomic fetch-and-add on remote; the old value
// lands in the 8 bytes at local.
func (f *Fabric) FetchAdd(r int, local Local, remote Remote, add uint64) (uint64, error) {
	return f.post(r, verbs.OpFetchAdd, local, 8, remote, add, 0)
}

// CompareSwap posts an 8-byte atomic compare-and-swap on remote; the old
// value lands in the 8 bytes at local.
func (f *Fabric) CompareSwap(r int, local Local, remote Remote, compare, swap uint64) (uint64, error) {
	return f.post(r, verbs.OpCompareSwap, local, 8, remote, compare, swap)
}

func (f *Fabric) post(r int, op verbs.Opcode, local Local, n uint32, remote Remote, arg0, arg1 uint64) (uint64, error) {
	p, err := f.peerOf(r)
	if err != nil {
		return 0, fmt.Errorf("posting a %v to rank %d: %w", op, r, err)
	}
	p.postMu.Lock()
	defer p.postMu.Unlock()
	p.sge[0] = verbs.SGE{Addr: local.Addr, Length: n, LKey: local.LKey}
	p.wr = verbs.SendWR{Op: op, SGL: p.sge[:1], RemoteAddr: remote.Addr, RKey: remote.RKey, CompareAdd: arg0, Swap: arg1}
	if n == 0 {
		p.wr.SGL = nil
	}
	return f.postLocked(p, &p.wr)
}

// ChainMax is the most work requests PostAtomics posts as one chain.
const ChainMax = 32

// Atomic is one 8-byte atomic for PostAtomics: a fetch-and-add (add in
// CompareAdd) or a compare-and-swap (compare in CompareAdd, new value in
// Swap) on Remote, whose old value lands in the 8 bytes at Local.
type Atomic struct {
	Op         verbs.Opcode // verbs.OpFetchAdd or verbs.OpCompareSwap
	Local      Local
	Remote     Remote
	CompareAdd uint64
	Swap       uint64
}

// PostAtomics posts ops to rank r, in order, as chains of up to ChainMax
// work requests: one system call (soft) or one crossing into C (ibv) per
// chain instead of one per operation. It returns the last one's sequence
// number for Wait; it allocates nothing.
func (f *Fabric) PostAtomics(r int, ops []Atomic) (uint64, error) {
	p, err := f.peerOf(r)
	if err != nil {
		return 0, fmt.Errorf("posting atomics to rank %d: %w", r, err)
	}
	p.postMu.Lock()
	defer p.postMu.Unlock()
	var last uint64
	for len(ops) > 0 {
		n := min(len(ops), ChainMax)
		for i, op := range ops[:n] {
			if op.Op != verbs.OpFetchAdd && op.Op != verbs.OpCompareSwap {
				return last, fmt.Errorf("transport: PostAtomics: opcode %v", op.Op)
			}
			p.chainSGE[i] = verbs.SGE{Addr: op.Local.Addr, Length: 8, LKey: op.Local.LKey}
			p.chain[i] = verbs.SendWR{Op: op.Op, SGL: p.chainSGE[i : i+1], RemoteAddr: op.Remote.Addr,
				RKey: op.Remote.RKey, CompareAdd: op.CompareAdd, Swap: op.Swap}
		}
		seq, err := f.postChainLocked(p, n)
		if err != nil {
			return last, err
		}
		last = seq
		ops = ops[n:]
	}
	return last, nil
}
