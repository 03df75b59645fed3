package transport

import (
	"fmt"

	"github.com/rmago/rmago/verbs"
)

// Guards reports whether rank r's provider takes guarded writes
// (verbs.DeviceAttr.Guards: soft), so that PostGuardedWrite may be used.
func (f *Fabric) Guards(r int) bool {
	p := f.peers[r].Load()
	return p != nil && p.c != nil && p.c.guards && p.selfRx == nil && p.inline == nil
}

// MaxGuardedWrite is the longest write PostGuardedWrite takes.
const MaxGuardedWrite = verbs.MaxGuardedWrite

// PostGuardedWrite posts to rank r, as one chain, the atomics guards and
// then a write of n bytes from local to remote that rank r's provider
// executes only if every guard held: a compare-and-swap that swapped, a
// fetch-and-add whose old value has none of its Mask's bits. The old
// values land in the guards' Local words as usual. It returns the
// write's sequence number, whose completion implies the atomics' (the
// write completes whether it was executed or skipped). Only where Guards
// says so; n at most MaxGuardedWrite; guards one to three.
func (f *Fabric) PostGuardedWrite(r int, guards []Atomic, local Local, remote Remote, n uint32) (uint64, error) {
	return f.postGuarded(r, guards, verbs.OpWrite, local, remote, n)
}

// PostGuardedRead is PostGuardedWrite for a read of n bytes from remote
// into local, which the target runs whatever the guards found (a read
// changes nothing there): if they did not hold, its data may be torn,
// and the caller reads again once the lock is held.
func (f *Fabric) PostGuardedRead(r int, guards []Atomic, local Local, remote Remote, n uint32) (uint64, error) {
	return f.postGuarded(r, guards, verbs.OpRead, local, remote, n)
}

// postGuarded posts guards and then a write (guarded) or read as one chain.
func (f *Fabric) postGuarded(r int, guards []Atomic, op verbs.Opcode, local Local, remote Remote, n uint32) (uint64, error) {
	if len(guards) == 0 || len(guards) > 3 || n > MaxGuardedWrite {
		return 0, fmt.Errorf("transport: a guarded %v of %d bytes with %d guards", op, n, len(guards))
	}
	if !f.Guards(r) {
		return 0, fmt.Errorf("transport: rank %d's provider takes no guarded writes", r)
	}
	p, err := f.peerOf(r)
	if err != nil {
		return 0, fmt.Errorf("posting a guarded write to rank %d: %w", r, err)
	}
	p.postMu.Lock()
	defer p.postMu.Unlock()
	flag := verbs.GuardSet
	for i, g := range guards {
		if g.Op != FetchAddOp && g.Op != CompareSwapOp {
			return 0, fmt.Errorf("transport: PostGuardedWrite: opcode %v", g.Op)
		}
		p.chainSGE[i] = verbs.SGE{Addr: g.Local.Addr, Length: 8, LKey: f.lkeyOn(g.Local.LKey, p.ci)}
		p.chain[i] = verbs.SendWR{Op: g.Op.verbs(), Flags: flag, SGL: p.chainSGE[i : i+1], RemoteAddr: g.Remote.Addr,
			RKey: g.Remote.RKey, CompareAdd: g.CompareAdd, Swap: g.Swap, GuardMask: g.Mask}
		flag = verbs.GuardAnd
	}
	k := len(guards)
	p.chainSGE[k] = verbs.SGE{Addr: local.Addr, Length: n, LKey: f.lkeyOn(local.LKey, p.ci)}
	p.chain[k] = verbs.SendWR{Op: op, SGL: p.chainSGE[k : k+1], RemoteAddr: remote.Addr, RKey: remote.RKey}
	if op == verbs.OpWrite {
		p.chain[k].Flags = verbs.Guarded
	}
	if n == 0 {
		p.chain[k].SGL = nil
	}
	return f.postChainLocked(p, k+1)
}
