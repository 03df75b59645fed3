// Package accop applies verbs.OpAccumulate requests to memory: the
// element-wise reductions (verbs.AccOp) over every element type
// (verbs.ElemType), each element updated atomically with CPU atomics on the
// 8-byte aligned word that holds it, so that an accumulate is atomic per
// element with respect to the fetch-and-adds and compare-and-swaps a
// software responder runs on the same words (sync/atomic on 8-byte words)
// and to the other accumulates it runs. Providers whose responder is
// software (soft, and the shared-memory provider) execute accumulates with
// it.
//
// Words are read and written as little-endian machine words: the package,
// like the rest of rmago, assumes a little-endian machine.
package accop

import (
	"encoding/binary"
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
	if n <= 0 {
		return
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
	base := unsafe.Add(dst, -lo)
	le := binary.LittleEndian
	for i, k := 0, 0; k < n; i++ {
		w := (*uint64)(unsafe.Add(base, 8*i))
		a := 0
		if i == 0 {
			a = lo
		}
		b := min(8, a+n-k)
		whole := a == 0 && b == 8
		var s uint64
		if op != verbs.AccNoOp {
			if whole {
				s = le.Uint64(src[k:])
			} else {
				var tmp [8]byte
				copy(tmp[a:b], src[k:k+b-a])
				s = le.Uint64(tmp[:])
			}
		}
		var o uint64
		if whole {
			o = updateWord[T](w, s, op)
		} else {
			o = updatePart[T](w, s, uint(a), uint(b), op)
		}
		if old != nil {
			if whole {
				le.PutUint64(old[k:], o)
			} else {
				var tmp [8]byte
				le.PutUint64(tmp[:], o)
				copy(old[k:k+b-a], tmp[a:b])
			}
		}
		k += b - a
	}
}

// updateWord applies op with the operand word s to every element of the
// word at w and returns the word's old value.
func updateWord[T number](w *uint64, s uint64, op verbs.AccOp) uint64 {
	var zero T
	switch op {
	case verbs.AccNoOp:
		return atomic.LoadUint64(w)
	case verbs.AccReplace:
		return atomic.SwapUint64(w, s)
	case verbs.AccSum:
		if unsafe.Sizeof(zero) == 8 && !isFloat[T]() {
			return atomic.AddUint64(w, s) - s
		}
	case verbs.AccBAnd:
		return atomic.AndUint64(w, s)
	case verbs.AccBOr:
		return atomic.OrUint64(w, s)
	}
	for {
		o := atomic.LoadUint64(w)
		nw := combine[T](o, s, 0, 8, op)
		if nw == o || atomic.CompareAndSwapUint64(w, o, nw) {
			return o
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
	size := uint(unsafe.Sizeof(zero))
	for sh := a; sh < b; sh += size {
		o = withElem(o, sh, Reduce(op, elemAt[T](o, sh), elemAt[T](s, sh)))
	}
	return o
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
		return fromBits[T](bitsOf(t) & bitsOf(v))
	case verbs.AccBOr:
		return fromBits[T](bitsOf(t) | bitsOf(v))
	case verbs.AccBXor:
		return fromBits[T](bitsOf(t) ^ bitsOf(v))
	case verbs.AccReplace:
		return v
	}
	return t // NoOp
}

func isFloat[T number]() bool {
	var one T = 1
	return one/2*2 != 0 // 0.5*2 = 1 for floats, 0*2 = 0 for integers
}

// bitsOf is v's memory, zero-extended to 64 bits (little-endian machines).
func bitsOf[T number](v T) uint64 {
	var w uint64
	*(*T)(unsafe.Pointer(&w)) = v
	return w
}

func fromBits[T number](w uint64) T { return *(*T)(unsafe.Pointer(&w)) }

// elemAt extracts the element at byte shift sh of word w.
func elemAt[T number](w uint64, sh uint) T { return fromBits[T](w >> (8 * sh)) }

// withElem replaces the element at byte shift sh of word w by v.
func withElem[T number](w uint64, sh uint, v T) uint64 {
	size := uint(unsafe.Sizeof(v))
	mask := ^uint64(0)
	if size < 8 {
		mask = uint64(1)<<(8*size) - 1
	}
	return w&^(mask<<(8*sh)) | (bitsOf(v)&mask)<<(8*sh)
}
