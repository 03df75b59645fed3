package rma_test

import (
	"fmt"
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// modes are the two ways an accumulate can go: bulk requests (the soft
// provider's default) and the per-word NIC atomics (what ibv does).
var modes = []struct {
	name string
	bulk bool
}{{"bulk", true}, {"atomics", false}}

// accBench runs body on rank 0 of a two-rank job with an int64 window of n
// elements on both ranks and a registered origin of n, in a lock_all epoch.
func accBench(b *testing.B, n int, bulk bool, body func(win, src *rma.Window[int64]) error) {
	rmatest.Run(b, 2, func(w *rma.World) error {
		rma.SetBulkAccumulate(w, bulk)
		win, err := rma.Allocate[int64](w, n)
		if err != nil {
			return err
		}
		src, err := rma.Allocate[int64](w, n)
		if err != nil {
			return err
		}
		for i := range src.Local() {
			src.Local()[i] = 1
		}
		if err := win.LockAll(0); err != nil {
			return err
		}
		if w.Rank() == 0 {
			b.SetBytes(int64(8 * n))
			b.ReportAllocs()
			b.ResetTimer()
			err = body(win, src)
			b.StopTimer()
		}
		return errorsJoin(err, win.UnlockAll(), w.Barrier(), win.Free(), src.Free())
	})
}

// BenchmarkAccumulateFlush measures Accumulate(Sum) of int64 elements
// followed by Flush (OSU's acc_latency), bulk and per-word atomics.
func BenchmarkAccumulateFlush(b *testing.B) {
	for _, n := range []int{2, 16, 128, 1024, 8192, 131072} {
		for _, m := range modes {
			b.Run(fmt.Sprintf("%dB/%s", 8*n, m.name), func(b *testing.B) {
				accBench(b, n, m.bulk, func(win, src *rma.Window[int64]) error {
					for i := 0; i < b.N; i++ {
						if err := win.Accumulate(src.Local(), 1, 0, rma.Sum); err != nil {
							return err
						}
						if err := win.Flush(1); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
	}
}

// BenchmarkAccumulateLarge compares a 64 MiB Accumulate(Sum) of int64 with
// a Put of the same size, each followed by Flush.
func BenchmarkAccumulateLarge(b *testing.B) {
	const n = 8 << 20 // 64 MiB of int64
	b.Run("put", func(b *testing.B) {
		accBench(b, n, true, func(win, src *rma.Window[int64]) error {
			for i := 0; i < b.N; i++ {
				if err := errorsJoin(win.Put(src.Local(), 1, 0), win.Flush(1)); err != nil {
					return err
				}
			}
			return nil
		})
	})
	for _, op := range []rma.Op{rma.Sum, rma.Max} {
		b.Run("accumulate-"+op.String(), func(b *testing.B) {
			accBench(b, n, true, func(win, src *rma.Window[int64]) error {
				for i := 0; i < b.N; i++ {
					if err := errorsJoin(win.Accumulate(src.Local(), 1, 0, op), win.Flush(1)); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
	b.Run("get-accumulate-Sum", func(b *testing.B) {
		res := make([]int64, n)
		accBench(b, n, true, func(win, src *rma.Window[int64]) error {
			for i := 0; i < b.N; i++ {
				if err := win.GetAccumulate(src.Local(), res, 1, 0, rma.Sum); err != nil {
					return err
				}
			}
			return nil
		})
	})
}

// BenchmarkGetAccumulateOne measures GetAccumulate of one int64 element,
// bulk and per-word atomics: Sum (a NIC fetch-and-add either way) and Max
// (a bulk request, or a compare-and-swap round). FetchAndOp always takes
// the per-word atomics.
func BenchmarkGetAccumulateOne(b *testing.B) {
	for _, op := range []rma.Op{rma.Sum, rma.Max} {
		for _, m := range modes {
			b.Run(op.String()+"/"+m.name, func(b *testing.B) {
				accBench(b, 4, m.bulk, func(win, src *rma.Window[int64]) error {
					res := make([]int64, 1)
					for i := 0; i < b.N; i++ {
						if err := win.GetAccumulate(src.Local()[:1], res, 1, 2, op); err != nil {
							return err
						}
					}
					return nil
				})
			})
		}
	}
}
