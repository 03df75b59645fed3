package accop

import (
	"sync/atomic"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

func loadWord(w *uint64) uint64           { return atomic.LoadUint64(w) }
func casWord(w *uint64, o, n uint64) bool { return atomic.CompareAndSwapUint64(w, o, n) }
func addWord(w *uint64, d uint64) uint64  { return atomic.AddUint64(w, d) }

func elemAt[T number](w uint64, sh uint) T { return fromBits[T](w >> (8 * sh)) }

func withElem[T number](w uint64, sh uint, v T) uint64 {
	return combine[T](w, toBits(v)<<(8*sh), sh, sh+uint(unsafe.Sizeof(v)), verbs.AccReplace) // AccReplace on the one element
}
