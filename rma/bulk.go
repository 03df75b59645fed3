package rma

import (
	"unsafe"

	"github.com/rmago/rmago/transport"
)

// Bulk accumulates. When the provider executes them (soft and shm:
// transport.Fabric.BulkAccumulate), an accumulate is one request carrying
// its operand, like a put, and the provider combines it into the target's
// window element by element (soft: the target's responder; shm: the
// origin, on the mapped window, or the owner's socket for a created one),
// each element atomically with the CPU atomics it also runs the NIC-style
// fetch-and-adds and compare-and-swaps with, so bulk and per-word
// accumulates, FetchAndOp and CompareAndSwap from any rank (the target's
// own, through its loopback queue pair, included) are atomic against each
// other. Requests to one target run in queue-pair order, which keeps MPI's
// accumulate ordering. A 64 MiB Accumulate then costs a few times a Put of
// it (2-3x on soft), instead of one remote atomic per element.
//
// Accumulates without results are posted and complete at the next
// synchronization (or the request's Wait), as puts do; origin goes as it
// is when it lies in registered memory, else through the bounce buffer.
// GetAccumulate goes through the bounce buffer in pieces of the provider's
// fetch limit: the origin's elements are copied in, the old values come
// back in their place and are copied into result when the piece retires.

// bulkWorthIt reports whether an accumulate of count elements goes as a
// bulk request: everything but a single 8-byte integer Sum, which a NIC
// fetch-and-add does in one request too, without the bounce buffer. (A
// single word otherwise costs the same either way when it has results,
// BenchmarkGetAccumulateOne, and saves the compare-and-swap round trip
// without.)
func (win *Window[T]) bulkWorthIt(count int, op Op) bool {
	return count > 1 || win.esize != 8 || op != Sum || isFloat[T]()
}

// elemType is T as a transport element type.
func elemType[T Number]() transport.ElemType {
	var zero T
	size := unsafe.Sizeof(zero)
	switch {
	case isFloat[T]() && size == 4:
		return transport.Float32
	case isFloat[T]():
		return transport.Float64
	}
	signed := zero-1 < 0
	var t transport.ElemType
	switch size {
	case 1:
		t = transport.Int8
	case 2:
		t = transport.Int16
	case 4:
		t = transport.Int32
	default:
		t = transport.Int64
	}
	if !signed {
		t += transport.Uint8 - transport.Int8
	}
	return t
}

// bulkAccumulate posts an accumulate as bulk requests. Without results it
// returns the last request to complete later; with results, the request
// whose completion (Wait) lands the old values in result.
func (win *Window[T]) bulkAccumulate(origin, result []T, target, disp int, op Op) (Request, error) {
	direct, err := win.beginAtomics(target, disp, len(origin))
	if err != nil || len(origin) == 0 {
		return Request{}, err
	}
	defer win.endAtomics(target)
	w := win.w
	if direct != nil {
		if err := w.f.DirectReady(target); err != nil {
			return Request{}, err
		}
		directAccumulate(direct, origin, result, disp, op)
		return Request{}, nil
	}
	rw := &win.remotes[target]
	remote := transport.Remote{Addr: rw.addr + uint64(disp*win.esize), RKey: rw.akey}
	acc := transport.Accumulate{Op: transport.AccOp(op), Type: elemType[T]()}
	n := len(origin) * win.esize
	p := unsafe.Pointer(unsafe.SliceData(origin))
	src := unsafe.Slice((*byte)(p), n)
	req := Request{w: w, rank: target}
	if result != nil {
		res := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(result))), n)
		w.stageMu.Lock()
		req.seq, err = w.stage.getAccumulate(target, src, res, remote, acc, w.maxFetch)
		w.stageMu.Unlock()
		req.staged = true
		return req, err
	}
	if local, ok := w.local(p, uintptr(n)); ok {
		// Zero copy: the origin lies in registered memory.
		for off := 0; off < n; off += maxChunk {
			acc.Local = transport.Local{Addr: local.Addr + uint64(off), LKey: local.LKey}
			acc.Len = uint32(min(maxChunk, n-off))
			acc.Remote = transport.Remote{Addr: remote.Addr + uint64(off), RKey: remote.RKey}
			if req.seq, err = w.f.PostAccumulate(target, acc); err != nil {
				return Request{}, err
			}
		}
		return req, nil
	}
	w.stageMu.Lock()
	req.seq, err = w.stage.accumulate(target, src, remote, acc)
	w.stageMu.Unlock()
	return req, err
}

// accumulate sends b as the operand of accumulates to remote at rank r
// through the bounce buffer and returns the last request's sequence number.
func (s *stager) accumulate(r int, b []byte, remote transport.Remote, acc transport.Accumulate) (last uint64, err error) {
	for len(b) > 0 {
		n := min(len(b), stageSize/2)
		off, pad, err := s.take(n)
		if err != nil {
			return 0, err
		}
		copy(s.reg.Bytes()[off:off+n], b[:n])
		acc.Local, acc.Len, acc.Remote = s.local(off), uint32(n), remote
		seq, err := s.w.f.PostAccumulate(r, acc)
		if err != nil {
			s.used -= pad + n
			return 0, err
		}
		s.push(staged{off: off, n: n, rank: r, seq: seq, pad: pad})
		b = b[n:]
		remote.Addr += uint64(n)
		last = seq
	}
	return last, nil
}

// getAccumulate runs fetching accumulates of b to remote at rank r through
// the bounce buffer, in pieces of at most maxFetch bytes (whole elements);
// the old values land in dst as the pieces retire.
func (s *stager) getAccumulate(r int, b, dst []byte, remote transport.Remote, acc transport.Accumulate, maxFetch int) (last uint64, err error) {
	acc.Fetch = true
	maxFetch &^= 7
	for len(b) > 0 {
		n := min(len(b), maxFetch)
		off, pad, err := s.take(n)
		if err != nil {
			return 0, err
		}
		if acc.Op != transport.AccNoOp {
			copy(s.reg.Bytes()[off:off+n], b[:n])
		}
		acc.Local, acc.Len, acc.Remote = s.local(off), uint32(n), remote
		seq, err := s.w.f.PostAccumulate(r, acc)
		if err != nil {
			s.used -= pad + n
			return 0, err
		}
		s.push(staged{off: off, n: n, rank: r, seq: seq, dst: dst[:n], pad: pad})
		b, dst = b[n:], dst[n:]
		remote.Addr += uint64(n)
		last = seq
	}
	return last, nil
}
