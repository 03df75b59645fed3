package transport

import (
	"fmt"

	"github.com/rmago/rmago/verbs"
)

// Bulk accumulates: one request carries an operand of many elements, which
// the target's provider combines into the peer's memory element by element,
// atomically per element (verbs.OpAccumulate, an rmago extension executed
// by providers whose responder is software). On other providers the caller
// builds accumulates from Atomic.

// AccOp is the reduction of an Accumulate (verbs.AccOp; the values match
// rma.Op).
type AccOp = verbs.AccOp

// ElemType is the element type of an Accumulate (verbs.ElemType).
type ElemType = verbs.ElemType

// Reductions and element types, as in package verbs.
const (
	AccSum     = verbs.AccSum
	AccProd    = verbs.AccProd
	AccMin     = verbs.AccMin
	AccMax     = verbs.AccMax
	AccBAnd    = verbs.AccBAnd
	AccBOr     = verbs.AccBOr
	AccBXor    = verbs.AccBXor
	AccReplace = verbs.AccReplace
	AccNoOp    = verbs.AccNoOp

	Int8    = verbs.Int8
	Int16   = verbs.Int16
	Int32   = verbs.Int32
	Int64   = verbs.Int64
	Uint8   = verbs.Uint8
	Uint16  = verbs.Uint16
	Uint32  = verbs.Uint32
	Uint64  = verbs.Uint64
	Float32 = verbs.Float32
	Float64 = verbs.Float64
)

// Accumulate is one bulk accumulate: Len bytes of operand at Local (whole
// elements of Type) combined with Op into Remote (aligned to the element
// size, in a region with atomic access). With Fetch the elements' old
// values replace the operand at Local, and Len is at most the device's
// MaxFetchAccumulate (BulkAccumulate).
type Accumulate struct {
	Op     AccOp
	Type   ElemType
	Local  Local
	Len    uint32
	Remote Remote
	Fetch  bool
}

// BulkAccumulate reports whether every provider the fabric uses executes
// Accumulate (soft and shm do, ibv does not), and the most bytes a
// fetching one may carry to any peer.
func (f *Fabric) BulkAccumulate() (ok bool, maxFetch int) {
	for i, c := range f.ctxs {
		a := c.ctx.Attr()
		if !a.Accumulate || a.MaxFetchAccumulate <= 0 {
			return false, 0
		}
		if i == 0 || a.MaxFetchAccumulate < maxFetch {
			maxFetch = a.MaxFetchAccumulate
		}
	}
	return maxFetch > 0, maxFetch
}

// PostAccumulate posts a to rank r and returns its sequence number for
// Wait. A fetching one is signalled, so that its own completion ends a
// Wait for it; the others complete like writes. It allocates nothing.
func (f *Fabric) PostAccumulate(r int, a Accumulate) (uint64, error) {
	if !a.Op.Valid(a.Type) {
		return 0, fmt.Errorf("transport: posting an accumulate to rank %d: operation %d on element type %d", r, a.Op, a.Type)
	}
	p, err := f.peerOf(r)
	if err != nil {
		return 0, fmt.Errorf("posting an accumulate to rank %d: %w", r, err)
	}
	p.postMu.Lock()
	defer p.postMu.Unlock()
	var flags verbs.SendFlags
	if a.Fetch {
		flags = verbs.Signaled
	}
	p.sge[0] = verbs.SGE{Addr: a.Local.Addr, Length: a.Len, LKey: f.lkeyOn(a.Local.LKey, p.ci)}
	p.wr = verbs.SendWR{Op: verbs.OpAccumulate, Flags: flags, SGL: p.sge[:1], RemoteAddr: a.Remote.Addr, RKey: a.Remote.RKey,
		Acc: verbs.Accumulate{Op: a.Op, Type: a.Type, Fetch: a.Fetch}}
	if a.Len == 0 {
		p.wr.SGL = nil
	}
	return f.postLocked(p, &p.wr)
}
