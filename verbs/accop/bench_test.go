package accop

import (
	"testing"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

// BenchmarkApply applies a 64 KiB operand (a piece of a large accumulate)
// to 8-byte aligned memory, without and with old values.
func BenchmarkApply(b *testing.B) {
	const n = 64 << 10
	cases := []struct {
		name string
		op   verbs.AccOp
		t    verbs.ElemType
	}{
		{"int64-sum", verbs.AccSum, verbs.Int64},
		{"int64-max", verbs.AccMax, verbs.Int64},
		{"float64-sum", verbs.AccSum, verbs.Float64},
		{"int32-sum", verbs.AccSum, verbs.Int32},
		{"uint8-bxor", verbs.AccBXor, verbs.Uint8},
	}
	mem := wordsOf[uint64](n / 8)
	src := make([]byte, n)
	old := make([]byte, n)
	for i := range src {
		src[i] = byte(i)
	}
	for _, c := range cases {
		for _, fetch := range []bool{false, true} {
			name := c.name
			var o []byte
			if fetch {
				name, o = name+"-fetch", old
			}
			b.Run(name, func(b *testing.B) {
				b.SetBytes(n)
				for b.Loop() {
					Apply(unsafe.Pointer(&mem[0]), n, src, o, c.op, c.t)
				}
			})
		}
	}
}
