package rma_test

import (
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// atomicBench runs body on rank 0 of a two-rank in-process job, with rank
// 1's window a created window of n elements (an odd n puts the last
// element of a 4-byte type in an 8-byte word that ends outside the slice).
func atomicBench[T rma.Number](b *testing.B, n int, body func(win *rma.Window[T]) error) {
	rmatest.Run(b, 2, func(w *rma.World) error {
		win, err := rma.Create(w, make([]T, n))
		if err != nil {
			return err
		}
		if err := win.LockAll(0); err != nil {
			return err
		}
		if w.Rank() == 0 {
			b.ReportAllocs()
			b.ResetTimer()
			err = body(win)
			b.StopTimer()
		}
		return errorsJoin(err, win.UnlockAll(), win.Free())
	})
}

// BenchmarkAccFetchAddInt64 measures FetchAndOp(Sum) on an 8-byte integer:
// one NIC fetch-and-add round trip.
func BenchmarkAccFetchAddInt64(b *testing.B) {
	atomicBench(b, 3, func(win *rma.Window[int64]) error {
		for i := 0; i < b.N; i++ {
			if _, err := win.FetchAndOp(1, 1, 2, rma.Sum); err != nil {
				return err
			}
		}
		return nil
	})
}

// BenchmarkAccFetchAddInt32 measures FetchAndOp(Sum) on the last element of
// an odd-length int32 window: a compare-and-swap loop on its word.
func BenchmarkAccFetchAddInt32(b *testing.B) {
	atomicBench(b, 4, func(win *rma.Window[int32]) error {
		for i := 0; i < b.N; i++ {
			if _, err := win.FetchAndOp(1, 1, 2, rma.Sum); err != nil {
				return err
			}
		}
		return nil
	})
}

// BenchmarkAccCASInt32 measures CompareAndSwap on an int32 element.
func BenchmarkAccCASInt32(b *testing.B) {
	atomicBench(b, 4, func(win *rma.Window[int32]) error {
		for i := 0; i < b.N; i++ {
			if _, err := win.CompareAndSwap(int32(i), int32(i+1), 1, 1); err != nil {
				return err
			}
		}
		return nil
	})
}

// BenchmarkAccSumInt32x64 measures Accumulate(Sum) of 64 int32 elements (32
// words, one pipelined compare-and-swap round when the guesses hold).
func BenchmarkAccSumInt32x64(b *testing.B) {
	atomicBench(b, 64, func(win *rma.Window[int32]) error {
		src := make([]int32, 64)
		for i := range src {
			src[i] = 1
		}
		for i := 0; i < b.N; i++ {
			if err := win.Accumulate(src, 1, 0, rma.Sum); err != nil {
				return err
			}
		}
		return nil
	})
}

// BenchmarkAccSumInt64x64 measures Accumulate(Sum) of 64 int64 elements,
// posted as fetch-and-adds and completed by a flush.
func BenchmarkAccSumInt64x64(b *testing.B) {
	atomicBench(b, 64, func(win *rma.Window[int64]) error {
		src := make([]int64, 64)
		for i := range src {
			src[i] = 1
		}
		for i := 0; i < b.N; i++ {
			if err := win.Accumulate(src, 1, 0, rma.Sum); err != nil {
				return err
			}
			if err := win.Flush(1); err != nil {
				return err
			}
		}
		return nil
	})
}
