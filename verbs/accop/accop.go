// Package accop applies verbs.OpAccumulate requests to memory: the
// element-wise reductions (verbs.AccOp) over every element type
// (verbs.ElemType), each element updated atomically with CPU atomics on the
// 8-byte aligned word that holds it, so that an accumulate is atomic per
// element with respect to the fetch-and-adds and compare-and-swaps a
// software responder runs on the same words (FetchAdd and CompareSwap,
// sync/atomic on 8-byte words) and to the other accumulates it runs.
// Providers whose responder is software (soft, and the shared-memory
// provider) execute accumulates and atomics with it.
//
// Words are read and written as little-endian machine words: the package,
// like the rest of rmago, assumes a little-endian machine.
package accop

import (
	"encoding/binary"
	"math"
	"sync/atomic"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// Apply combines the n bytes of operand src (whole elements of type t,
// little-endian) into the elements at dst with op, one 8-byte word at a
// time, atomically per word; when old is not nil, the elements' previous
// values land in old[:n]. old may be src itself (each word's operand is
// read before its old value is written). With verbs.AccNoOp, src is not
// read and may be nil.
//
// dst must be aligned to the element size, and the caller must have
// checked that the aligned 8-byte words holding [dst, dst+n) are memory it
// may update: Apply changes only the bytes of [dst, dst+n), but its
// compare-and-swaps rewrite the other bytes of the first and last words
// with the values they held (atomically, so that a concurrent atomic store
// to them is never lost). op must be valid for t (verbs.AccOp.Valid).
// Apply allocates nothing.
func Apply(dst unsafe.Pointer, n int, src, old []byte, op verbs.AccOp, t verbs.ElemType) {
	if n <= 0 || op == verbs.AccNoOp && old == nil {
		return // nothing to change or to return
	}
	switch t {
	case verbs.Int8:
		apply[int8](dst, n, src, old, op)
	case verbs.Int16:
		apply[int16](dst, n, src, old, op)
	case verbs.Int32:
		apply[int32](dst, n, src, old, op)
	case verbs.Int64:
		apply[int64](dst, n, src, old, op)
	case verbs.Uint8:
		apply[uint8](dst, n, src, old, op)
	case verbs.Uint16:
		apply[uint16](dst, n, src, old, op)
	case verbs.Uint32:
		apply[uint32](dst, n, src, old, op)
	case verbs.Uint64:
		apply[uint64](dst, n, src, old, op)
	case verbs.Float32:
		apply[float32](dst, n, src, old, op)
	case verbs.Float64:
		apply[float64](dst, n, src, old, op)
	}
}

// number is the element types.
type number interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~float32 | ~float64
}

func apply[T number](dst unsafe.Pointer, n int, src, old []byte, op verbs.AccOp) {
	lo := int(uintptr(dst) & 7)
	k := 0 // operand bytes done
	if lo != 0 || n < 8 {
		// The first word holds elements of the operand only from byte lo
		// on (and up to byte lo+n).
		b := min(8, lo+n)
		w := (*uint64)(unsafe.Add(dst, -lo))
		part[T](w, src, old, lo, b, op)
		k = b - lo
	}
	if whole := (n - k) / 8; whole > 0 {
		var o []byte
		if old != nil {
			o = old[k : k+8*whole]
		}
		var s []byte
		if op != verbs.AccNoOp {
			s = src[k : k+8*whole]
		}
		words[T](unsafe.Slice((*uint64)(unsafe.Add(dst, k)), whole), s, o, op)
		k += 8 * whole
	}
	if k < n { // the last word holds elements up to byte n-k
		var s, o []byte
		if op != verbs.AccNoOp {
			s = src[k:]
		}
		if old != nil {
			o = old[k:]
		}
		part[T]((*uint64)(unsafe.Add(dst, k)), s, o, 0, n-k, op)
	}
}

// part applies op to the elements in bytes [a, b) of the word at w, whose
// operand is src[:b-a]; their old values land in old[:b-a].
func part[T number](w *uint64, src, old []byte, a, b int, op verbs.AccOp) {
	var tmp [8]byte
	if op != verbs.AccNoOp {
		copy(tmp[a:b], src[:b-a])
	}
	o := updatePart[T](w, binary.LittleEndian.Uint64(tmp[:]), uint(a), uint(b), op)
	if old != nil {
		binary.LittleEndian.PutUint64(tmp[:], o)
		copy(old[:b-a], tmp[a:b])
	}
}

// words applies op to whole words ws with operand words src (little-endian
// bytes), their old values landing in old if not nil: the bulk of a large
// accumulate, one atomic instruction per word where one does it, a
// compare-and-swap loop otherwise.
func words[T number](ws []uint64, src, old []byte, op verbs.AccOp) {
	le := binary.LittleEndian
	var zero T
	switch {
	case op == verbs.AccNoOp:
		for i := range ws {
			le.PutUint64(old[8*i:], atomic.LoadUint64(&ws[i]))
		}
	case op == verbs.AccReplace && old == nil:
		for i := range ws {
			atomic.StoreUint64(&ws[i], le.Uint64(src[8*i:]))
		}
	case op == verbs.AccReplace:
		for i := range ws {
			le.PutUint64(old[8*i:], atomic.SwapUint64(&ws[i], le.Uint64(src[8*i:])))
		}
	case op == verbs.AccSum && unsafe.Sizeof(zero) == 8 && !isFloat[T]():
		if old == nil {
			for i := range ws {
				atomic.AddUint64(&ws[i], le.Uint64(src[8*i:]))
			}
			return
		}
		for i := range ws {
			s := le.Uint64(src[8*i:])
			le.PutUint64(old[8*i:], atomic.AddUint64(&ws[i], s)-s)
		}
	case op == verbs.AccBAnd:
		for i := range ws {
			o := atomic.AndUint64(&ws[i], le.Uint64(src[8*i:]))
			if old != nil {
				le.PutUint64(old[8*i:], o)
			}
		}
	case op == verbs.AccBOr:
		for i := range ws {
			o := atomic.OrUint64(&ws[i], le.Uint64(src[8*i:]))
			if old != nil {
				le.PutUint64(old[8*i:], o)
			}
		}
	case op == verbs.AccSum && unsafe.Sizeof(zero) == 8: // float64
		floatSums(ws, src, old)
	case (op == verbs.AccMax || op == verbs.AccMin) && unsafe.Sizeof(zero) == 8:
		extremes[T](ws, src, old, op == verbs.AccMax)
	default:
		for i := range ws {
			s := le.Uint64(src[8*i:])
			w := &ws[i]
			var o uint64
			for {
				o = atomic.LoadUint64(w)
				nw := combine[T](o, s, 0, 8, op)
				if nw == o || atomic.CompareAndSwapUint64(w, o, nw) {
					break
				}
			}
			if old != nil {
				le.PutUint64(old[8*i:], o)
			}
		}
	}
}

// extremes is words for Max (max) or Min of 8-byte elements: the
// operand's element replaces the target's when it is larger (smaller) or
// NaN, with a compare-and-swap; a target that stays is only loaded. (The
// general loop's per-element combine took 1.5x as long.)
func extremes[T number](ws []uint64, src, old []byte, max bool) {
	le := binary.LittleEndian
	for i := range ws {
		s := le.Uint64(src[8*i:])
		v := fromBits[T](s)
		w := &ws[i]
		o := atomic.LoadUint64(w)
		for o != s {
			t := fromBits[T](o)
			if v == v && (max && !(v > t) || !max && !(v < t)) {
				break // the target's element stays
			}
			if atomic.CompareAndSwapUint64(w, o, s) {
				break
			}
			o = atomic.LoadUint64(w)
		}
		if old != nil {
			le.PutUint64(old[8*i:], o)
		}
	}
}

// floatSums is words for Sum of float64 elements: a compare-and-swap loop
// per element (there is no atomic floating-point add), without the general
// loop's per-element dispatch (which took 1.6x as long).
func floatSums(ws []uint64, src, old []byte) {
	le := binary.LittleEndian
	for i := range ws {
		v := math.Float64frombits(le.Uint64(src[8*i:]))
		w := &ws[i]
		o := atomic.LoadUint64(w)
		for {
			n := math.Float64bits(math.Float64frombits(o) + v)
			if n == o || atomic.CompareAndSwapUint64(w, o, n) {
				break
			}
			o = atomic.LoadUint64(w)
		}
		if old != nil {
			le.PutUint64(old[8*i:], o)
		}
	}
}

// updatePart applies op to the elements in bytes [a, b) of the word at w
// only, and returns the word's old value.
func updatePart[T number](w *uint64, s uint64, a, b uint, op verbs.AccOp) uint64 {
	if op == verbs.AccNoOp {
		return atomic.LoadUint64(w)
	}
	for {
		o := atomic.LoadUint64(w)
		nw := combine[T](o, s, a, b, op)
		if nw == o || atomic.CompareAndSwapUint64(w, o, nw) {
			return o
		}
	}
}

// combine applies op to the elements in bytes [a, b) of word o, with the
// operand's elements at the same places of word s.
func combine[T number](o, s uint64, a, b uint, op verbs.AccOp) uint64 {
	var zero T
	bits := 8 * uint(unsafe.Sizeof(zero))
	if bits == 64 {
		return toBits(Reduce(op, fromBits[T](o), fromBits[T](s)))
	}
	m := ^uint64(0) >> (64 - 8*(b-a)) << (8 * a) // the bytes [a, b)
	if !isFloat[T]() {
		// Whole-word forms of the integer operations that act on each
		// lane alike.
		switch op {
		case verbs.AccSum: // lane-wise addition: carries stop at each lane's top bit
			h := highBits(bits)
			sum := (o&^h + s&^h) ^ ((o ^ s) & h)
			return o&^m | sum&m
		case verbs.AccBAnd:
			return o & (s | ^m)
		case verbs.AccBOr:
			return o | s&m
		case verbs.AccBXor:
			return o ^ s&m
		case verbs.AccReplace:
			return o&^m | s&m
		}
	}
	mask := uint64(1)<<bits - 1
	for sh := 8 * a; sh < 8*b; sh += bits {
		r := Reduce(op, fromBits[T](o>>sh&mask), fromBits[T](s>>sh&mask))
		o = o&^(mask<<sh) | (toBits(r)&mask)<<sh
	}
	return o
}

// highBits is the top bit of every lane of a word of bits-bit lanes.
func highBits(bits uint) uint64 {
	switch bits {
	case 8:
		return 0x8080808080808080
	case 16:
		return 0x8000800080008000
	}
	return 0x8000000080000000
}

// Reduce combines the target's value t with the operand's value v: the
// reference semantics of each verbs.AccOp. Min and Max return NaN when
// either side is NaN (the operand's, if both are).
func Reduce[T number](op verbs.AccOp, t, v T) T {
	switch op {
	case verbs.AccSum:
		return t + v
	case verbs.AccProd:
		return t * v
	case verbs.AccMin:
		if v < t || v != v {
			return v
		}
		return t
	case verbs.AccMax:
		if v > t || v != v {
			return v
		}
		return t
	case verbs.AccBAnd:
		return fromBits[T](toBits(t) & toBits(v))
	case verbs.AccBOr:
		return fromBits[T](toBits(t) | toBits(v))
	case verbs.AccBXor:
		return fromBits[T](toBits(t) ^ toBits(v))
	case verbs.AccReplace:
		return v
	}
	return t // NoOp
}

func isFloat[T number]() bool {
	var one T = 1
	return one/2*2 != 0 // 0.5*2 = 1 for floats, 0*2 = 0 for integers
}

// toBits is v's bits (integers sign-extended; the caller masks them).
func toBits[T number](v T) uint64 {
	var zero T
	if isFloat[T]() {
		if unsafe.Sizeof(zero) == 4 {
			return uint64(math.Float32bits(float32(v)))
		}
		return math.Float64bits(float64(v))
	}
	return uint64(v)
}

// fromBits is the element whose bits are the low bits of w.
func fromBits[T number](w uint64) T {
	var zero T
	if isFloat[T]() {
		if unsafe.Sizeof(zero) == 4 {
			return T(math.Float32frombits(uint32(w)))
		}
		return T(math.Float64frombits(w))
	}
	return T(w)
}
