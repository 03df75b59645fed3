package accop

import "sync/atomic"

// FetchAdd adds d to the 8-byte word at w, atomically, and returns the
// value the word held: a verbs.OpFetchAdd on w (the sum wraps). w must be
// 8-byte aligned.
func FetchAdd(w *uint64, d uint64) uint64 {
	return atomic.AddUint64(w, d) - d
}

// CompareSwap stores swap in the 8-byte word at w if it holds cmp,
// atomically, and returns the value the word held: a verbs.OpCompareSwap
// on w, which swapped if and only if the result is cmp. w must be 8-byte
// aligned.
func CompareSwap(w *uint64, cmp, swap uint64) uint64 {
	for {
		old := atomic.LoadUint64(w)
		if old != cmp || atomic.CompareAndSwapUint64(w, old, swap) {
			return old
		}
	}
}
