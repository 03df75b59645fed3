package transport

import (
	"fmt"

	"github.com/rmago/rmago/verbs"
)

// Remote atomics: 8-byte fetch-and-add and compare-and-swap on a peer's
// registered word, whose old value lands in a word of this rank's. They
// allocate nothing: the request is built in storage the peer owns, under
// its post lock.

// AtomicOp is the operation of an Atomic.
type AtomicOp uint8

const (
	// FetchAddOp adds CompareAdd to the remote word.
	FetchAddOp AtomicOp = iota + 1
	// CompareSwapOp sets the remote word to Swap if it equals CompareAdd.
	CompareSwapOp
)

func (op AtomicOp) verbs() verbs.Opcode {
	switch op {
	case FetchAddOp:
		return verbs.OpFetchAdd
	case CompareSwapOp:
		return verbs.OpCompareSwap
	}
	return verbs.Opcode(0xff) // refused by PostAtomic(s)
}

func (op AtomicOp) String() string {
	switch op {
	case FetchAddOp:
		return "fetch-add"
	case CompareSwapOp:
		return "compare-swap"
	}
	return fmt.Sprintf("AtomicOp(%d)", uint8(op))
}

// Atomic is one 8-byte atomic: a fetch-and-add (add in CompareAdd) or a
// compare-and-swap (compare in CompareAdd, new value in Swap) on Remote,
// whose old value lands in the 8 bytes at Local.
type Atomic struct {
	Op         AtomicOp
	Local      Local
	Remote     Remote
	CompareAdd uint64
	Swap       uint64
	Mask       uint64 // PostGuardedWrite: a fetch-and-add guard holds if its old value has none of these bits
}

// FetchAdd posts an 8-byte atomic fetch-and-add on remote; the old value
// lands in the 8 bytes at local.
func (f *Fabric) FetchAdd(r int, local Local, remote Remote, add uint64) (uint64, error) {
	return f.post(r, verbs.OpFetchAdd, 0, local, 8, remote, add, 0)
}

// CompareSwap posts an 8-byte atomic compare-and-swap on remote; the old
// value lands in the 8 bytes at local.
func (f *Fabric) CompareSwap(r int, local Local, remote Remote, compare, swap uint64) (uint64, error) {
	return f.post(r, verbs.OpCompareSwap, 0, local, 8, remote, compare, swap)
}

// PostAtomic posts one atomic to rank r, signalled: its own completion
// tells Wait it is done, with no extra request to post. It returns the
// request's sequence number for Wait.
func (f *Fabric) PostAtomic(r int, a Atomic) (uint64, error) {
	if a.Op != FetchAddOp && a.Op != CompareSwapOp {
		return 0, fmt.Errorf("transport: posting an atomic to rank %d: operation %v", r, a.Op)
	}
	return f.post(r, a.Op.verbs(), verbs.Signaled, a.Local, 8, a.Remote, a.CompareAdd, a.Swap)
}

// PostAtomicSoon is PostAtomic for an atomic nobody waits for yet (a
// lock's release): the provider may hold it briefly to send it with the
// requests that follow (verbs.Coalesce).
func (f *Fabric) PostAtomicSoon(r int, a Atomic) (uint64, error) {
	if a.Op != FetchAddOp && a.Op != CompareSwapOp {
		return 0, fmt.Errorf("transport: posting an atomic to rank %d: operation %v", r, a.Op)
	}
	return f.post(r, a.Op.verbs(), verbs.Signaled|verbs.Coalesce, a.Local, 8, a.Remote, a.CompareAdd, a.Swap)
}

// ChainMax is the most work requests PostAtomics posts as one chain.
const ChainMax = 32

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
			if op.Op != FetchAddOp && op.Op != CompareSwapOp {
				return last, fmt.Errorf("transport: PostAtomics: opcode %v", op.Op)
			}
			p.chainSGE[i] = verbs.SGE{Addr: op.Local.Addr, Length: 8, LKey: f.lkeyOn(op.Local.LKey, p.ci)}
			p.chain[i] = verbs.SendWR{Op: op.Op.verbs(), SGL: p.chainSGE[i : i+1], RemoteAddr: op.Remote.Addr,
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
