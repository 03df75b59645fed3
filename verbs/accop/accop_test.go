package accop

import (
	"encoding/binary"
	"fmt"
	"math"
	"sync"
	"testing"
	"unsafe"

	"github.com/rmago/rmago/verbs"
)

var allOps = []verbs.AccOp{verbs.AccSum, verbs.AccProd, verbs.AccMin, verbs.AccMax, verbs.AccBAnd, verbs.AccBOr, verbs.AccBXor, verbs.AccReplace, verbs.AccNoOp}

// wordsOf makes 8-byte aligned memory of n words as elements of T.
func wordsOf[T number](n int) []T {
	var zero T
	w := make([]uint64, n)
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(w))), n*8/int(unsafe.Sizeof(zero)))
}

func asBytes[T number](s []T) []byte {
	var zero T
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s))), len(s)*int(unsafe.Sizeof(zero)))
}

func same[T number](a, b T) bool { return a == b || (a != a && b != b) }

// checkType applies every valid op to every sub-range [from, from+n) of a
// 3-word memory and compares with Reduce element by element: the old
// values, the new values, and the untouched elements outside.
func checkType[T number](t *testing.T, typ verbs.ElemType, vals []T) {
	mem := wordsOf[T](3)
	g := len(mem)
	for _, op := range allOps {
		if !op.Valid(typ) {
			continue
		}
		for from := 0; from < g; from++ {
			for n := 1; from+n <= g; n++ {
				for i := range mem {
					mem[i] = vals[(i*7+int(op))%len(vals)]
				}
				before := append([]T(nil), mem...)
				src := make([]T, n)
				for i := range src {
					src[i] = vals[(i*3+from+int(op))%len(vals)]
				}
				old := make([]T, n)
				Apply(unsafe.Pointer(&mem[from]), n*int(unsafe.Sizeof(src[0])), asBytes(src), asBytes(old), op, typ)
				for i := range mem {
					want := before[i]
					if i >= from && i < from+n {
						want = Reduce(op, before[i], src[i-from])
						if !same(old[i-from], before[i]) {
							t.Fatalf("%v %v [%d,+%d): old[%d] = %v, want %v", typ, op, from, n, i-from, old[i-from], before[i])
						}
					}
					if !same(mem[i], want) {
						t.Fatalf("%v %v [%d,+%d): element %d = %v, want %v (before %v)", typ, op, from, n, i, mem[i], want, before[i])
					}
				}
			}
		}
	}
}

func TestApplyEveryOpAndType(t *testing.T) {
	nan32, nan64 := float32(math.NaN()), math.NaN()
	checkType(t, verbs.Int8, []int8{0, 1, -1, 127, -128, 5, -7, 3})
	checkType(t, verbs.Int16, []int16{0, 1, -1, 32767, -32768, 300, -7})
	checkType(t, verbs.Int32, []int32{0, 1, -1, math.MaxInt32, math.MinInt32, 70000, -7})
	checkType(t, verbs.Int64, []int64{0, 1, -1, math.MaxInt64, math.MinInt64, 1 << 40, -7})
	checkType(t, verbs.Uint8, []uint8{0, 1, 255, 128, 5, 7})
	checkType(t, verbs.Uint16, []uint16{0, 1, 65535, 300, 7})
	checkType(t, verbs.Uint32, []uint32{0, 1, math.MaxUint32, 70000, 7})
	checkType(t, verbs.Uint64, []uint64{0, 1, math.MaxUint64, 1 << 63, 7})
	checkType(t, verbs.Float32, []float32{0, 1.5, -2, nan32, float32(math.Inf(1)), float32(math.Inf(-1)), 3e30, -0.25})
	checkType(t, verbs.Float64, []float64{0, 1.5, -2, nan64, math.Inf(1), math.Inf(-1), 1e300, -0.25})
}

// TestNoOpWithoutOld: NoOp with nowhere to put the old values does
// nothing (a responder may be sent one).
func TestNoOpWithoutOld(t *testing.T) {
	mem := wordsOf[int64](3)
	mem[1] = 7
	Apply(unsafe.Pointer(&mem[0]), 24, nil, nil, verbs.AccNoOp, verbs.Int64)
	Apply(unsafe.Pointer(&mem[0]), 12, nil, nil, verbs.AccNoOp, verbs.Int32)
	if mem[0] != 0 || mem[1] != 7 || mem[2] != 0 {
		t.Fatalf("%v", mem)
	}
}

// TestNaNRules pins Min and Max with NaN on either side: NaN wins.
func TestNaNRules(t *testing.T) {
	nan := math.NaN()
	for _, c := range []struct {
		op      verbs.AccOp
		tv, v   float64
		wantNaN bool
		want    float64
	}{
		{verbs.AccMin, 1, nan, true, 0},
		{verbs.AccMin, nan, 1, true, 0},
		{verbs.AccMax, 1, nan, true, 0},
		{verbs.AccMax, nan, 1, true, 0},
		{verbs.AccMin, 1, 2, false, 1},
		{verbs.AccMax, 1, 2, false, 2},
	} {
		mem := wordsOf[float64](1)
		mem[0] = c.tv
		var src [8]byte
		binary.LittleEndian.PutUint64(src[:], math.Float64bits(c.v))
		Apply(unsafe.Pointer(&mem[0]), 8, src[:], nil, c.op, verbs.Float64)
		if got := mem[0]; (got != got) != c.wantNaN || (!c.wantNaN && got != c.want) {
			t.Errorf("%v(%v, %v) = %v", c.op, c.tv, c.v, got)
		}
	}
}

// TestApplyConcurrent: goroutines accumulate into the same elements, mixed
// with word-wide atomics a responder runs (fetch-and-add, compare-and-swap
// loops), and every update counts exactly.
func TestApplyConcurrent(t *testing.T) {
	const g, k = 4, 300
	t.Run("int32 sum", func(t *testing.T) {
		mem := wordsOf[int32](4) // 8 elements
		ones := make([]int32, 7)
		for i := range ones {
			ones[i] = 1
		}
		var wg sync.WaitGroup
		for range g {
			wg.Add(2)
			go func() {
				defer wg.Done()
				for range k {
					Apply(unsafe.Pointer(&mem[1]), 28, asBytes(ones), nil, verbs.AccSum, verbs.Int32)
				}
			}()
			go func() { // a compare-and-swap increment of element 2, as an origin's CAS loop
				defer wg.Done()
				w := (*uint64)(unsafe.Pointer(&mem[2]))
				for range k {
					for {
						o := loadWord(w)
						if casWord(w, o, withElem(o, 0, elemAt[int32](o, 0)+1)) {
							break
						}
					}
				}
			}()
		}
		wg.Wait()
		want := []int32{0, g * k, 2 * g * k, g * k, g * k, g * k, g * k, g * k}
		if fmt.Sprint(mem) != fmt.Sprint(want) {
			t.Fatalf("%v, want %v", mem, want)
		}
	})
	t.Run("int64 sum and fetch-add", func(t *testing.T) {
		mem := wordsOf[int64](3)
		src := asBytes([]int64{1, 1, 1})
		var wg sync.WaitGroup
		olds := make([][]int64, g)
		for j := range g {
			olds[j] = make([]int64, k)
			wg.Add(2)
			go func() {
				defer wg.Done()
				old := make([]int64, 3)
				for i := range k {
					Apply(unsafe.Pointer(&mem[0]), 24, src, asBytes(old), verbs.AccSum, verbs.Int64)
					olds[j][i] = old[1]
				}
			}()
			go func() {
				defer wg.Done()
				for range k {
					addWord((*uint64)(unsafe.Pointer(&mem[1])), 1)
				}
			}()
		}
		wg.Wait()
		if mem[0] != g*k || mem[1] != 2*g*k || mem[2] != g*k {
			t.Fatalf("%v", mem)
		}
		seen := map[int64]bool{}
		for _, o := range olds {
			for _, v := range o {
				if seen[v] {
					t.Fatalf("old value %d returned twice", v)
				}
				seen[v] = true
			}
		}
	})
}
