package shm

import (
	"io"
	"unsafe"

	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/accop"
)

// Accumulates (verbs.OpAccumulate). On a peer's memory in shared memory
// (its memfd mapped here, or loopback) the origin applies the operand
// itself with accop, element-wise atomically with CPU atomics on the 8-byte
// words, as it runs fetch-adds and compare-and-swaps on them; so do the
// owner's responder (memory it alone reaches) and soft's responder. All of
// them are therefore atomic against each other on the same words. A
// fetching accumulate's old values replace the operand in the local SGL.

// maxFetchAcc is the most bytes a fetching accumulate carries: through the
// owner's socket, its old values wait in a buffer of the responder's until
// they are sent. (It is soft's limit too.)
const maxFetchAcc = 64 << 10

// accChunk is the piece of an operand the responder reads from the socket
// at a time (a multiple of 8: whole elements of every type).
const accChunk = 64 << 10

// accState is a queue pair's responder buffers for accumulates, made on
// the first one; used by the connection's reader goroutine only.
type accState struct {
	scratch []byte // operand pieces (accChunk)
	old     []byte // a fetching accumulate's old values (maxFetchAcc)
}

// accWords is the 8-byte aligned words [lo, hi) holding the n bytes of
// elements at addr, or ok false if they wrap the address space.
func accWords(addr, n uint64) (lo, hi uint64, ok bool) {
	hi = addr + n
	if hi < addr || hi > ^uint64(0)-7 {
		return 0, 0, false
	}
	return addr &^ 7, (hi + 7) &^ 7, true
}

// accArgs packs a reduction and element type for arg0; accOf unpacks them.
func accArgs(a verbs.Accumulate) uint64 { return uint64(a.Op) | uint64(a.Type)<<8 }

func accOf(arg0 uint64) (verbs.AccOp, verbs.ElemType) {
	return verbs.AccOp(arg0), verbs.ElemType(arg0 >> 8)
}

// accumulate runs an accumulate of total bytes (verbs.CheckAccumulate passed) on the
// peer's region, after the checks a NIC makes for an atomic: key, remote
// atomic access, a live region holding the words of the elements; sendMu
// held.
func (q *qp) accumulate(wr *verbs.SendWR, segs [][]byte, total uint64) verbs.Status {
	if total == 0 {
		return verbs.StatusSuccess // touches no memory and checks no key, as a zero-length write
	}
	lo, hi, ok := accWords(wr.RemoteAddr, total)
	if !ok {
		return verbs.StatusRemoteAccess
	}
	e, ok := q.peerTab.check(wr.RKey, lo, hi-lo, verbs.AccessRemoteAtomic)
	if !ok {
		q.forgetGone(wr.RKey)
		return verbs.StatusRemoteAccess
	}
	m, st := q.reach(wr.RKey, e)
	if st != verbs.StatusSuccess {
		e.done()
		return st
	}
	if m.reach != reachDirect {
		// No process_vm atomics: memory not in shared memory goes through
		// the owner's responder.
		e.done()
		return q.sockAcc(wr, segs, total)
	}
	op, t := wr.Acc.Op, wr.Acc.Type
	off := wr.RemoteAddr - m.addr // no pointer past the region's end (checkptr): offsets until used
	for _, s := range segs {
		if len(s) == 0 {
			continue
		}
		var old []byte
		if wr.Acc.Fetch {
			old = s
		}
		accop.Apply(unsafe.Add(m.base, off), len(s), s, old, op, t)
		off += uint64(len(s))
	}
	e.done()
	return verbs.StatusSuccess
}

// sockAcc sends an accumulate to the owner's responder; a fetching one's
// old values land in segs.
func (q *qp) sockAcc(wr *verbs.SendWR, segs [][]byte, total uint64) verbs.Status {
	h := msg{kind: mAcc, addr: wr.RemoteAddr, rkey: wr.RKey, arg0: accArgs(wr.Acc), arg2: total}
	payload, dst := segs, [][]byte(nil)
	if wr.Acc.Op == verbs.AccNoOp {
		payload = nil // not read: not sent
	}
	if wr.Acc.Fetch {
		h.arg1, dst = 1, segs
	}
	_, st := q.request(&h, payload, dst)
	return st
}

// respondAcc executes the peer's accumulate request h on this side's
// memory, reading its operand (h.len bytes) from conn; it fills in resp
// and returns the old values to send and the table entry held, if any.
func (q *qp) respondAcc(conn io.Reader, h *msg, resp *msg) (data []byte, e *entry, err error) {
	op, t := accOf(h.arg0)
	n := h.arg2
	fetch := h.arg1 != 0
	refuse := func(st verbs.Status) ([]byte, *entry, error) {
		resp.status = uint8(st)
		if e != nil {
			e.done()
		}
		_, err := io.CopyN(io.Discard, conn, int64(h.len))
		return nil, nil, err
	}
	carried := n // the operand's bytes: none for AccNoOp
	if op == verbs.AccNoOp {
		carried = 0
	}
	if !op.Valid(t) || uint64(h.len) != carried || n > 1<<32-1 || fetch && n > maxFetchAcc {
		return refuse(verbs.StatusRemoteOp)
	}
	if n == 0 {
		return nil, nil, nil
	}
	c := q.ctx
	lo, hi, ok := accWords(h.addr, n)
	if !ok {
		return refuse(verbs.StatusRemoteAccess)
	}
	e, ok = c.table.check(h.rkey, lo, hi-lo, verbs.AccessRemoteAtomic)
	r := c.lookup(h.rkey)
	if !ok || r == nil || r.pd != q.pd {
		return refuse(verbs.StatusRemoteAccess)
	}
	if es := uint64(t.Size()); h.addr%es != 0 || n%es != 0 {
		return refuse(verbs.StatusRemoteOp)
	}
	a := &q.acc
	if fetch && a.old == nil {
		a.old = make([]byte, maxFetchAcc) // once per queue pair
	}
	var old []byte
	if fetch {
		old = a.old[:n]
	}
	dst := unsafe.Add(r.base, h.addr-r.addr)
	if op == verbs.AccNoOp {
		accop.Apply(dst, int(n), nil, old, op, t)
		return old, e, nil
	}
	if a.scratch == nil {
		a.scratch = make([]byte, accChunk) // once per queue pair
	}
	for off := 0; off < int(n); {
		k := min(accChunk, int(n)-off)
		src := a.scratch[:k]
		if _, err := io.ReadFull(conn, src); err != nil {
			e.done()
			return nil, nil, err
		}
		var o []byte
		if old != nil {
			o = old[off : off+k]
		}
		accop.Apply(unsafe.Add(dst, off), k, src, o, op, t)
		off += k
	}
	return old, e, nil
}
