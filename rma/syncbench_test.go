package rma_test

import (
	"testing"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

// syncBench runs body(i) b.N times on every rank of an n-rank in-process
// job, on one window of 8 int64, with the timer on rank 0.
func syncBench(b *testing.B, n int, body func(w *rma.World, win *rma.Window[int64], src []int64) error) {
	rmatest.Run(b, n, func(w *rma.World) error {
		win, err := rma.Allocate[int64](w, 8)
		if err != nil {
			return err
		}
		src, err := rma.Allocate[int64](w, 8)
		if err != nil {
			return err
		}
		if err := w.Barrier(); err != nil {
			return err
		}
		if w.Rank() == 0 {
			b.ReportAllocs()
			b.ResetTimer()
		}
		err = body(w, win, src.Local()[:1])
		if w.Rank() == 0 {
			b.StopTimer()
		}
		if err != nil {
			return err
		}
		return errorsJoin(w.Barrier(), win.Free(), src.Free())
	})
}

// BenchmarkSyncLock measures Lock(Exclusive), one 8-byte put, Unlock: of
// the rank itself (one rank) and of a peer (rank 0 of two; rank 1 idle).
func BenchmarkSyncLock(b *testing.B) {
	for _, tc := range []struct {
		name   string
		n, tgt int
	}{{"self", 1, 0}, {"peer", 2, 1}} {
		b.Run(tc.name, func(b *testing.B) {
			syncBench(b, tc.n, func(w *rma.World, win *rma.Window[int64], src []int64) error {
				if w.Rank() != 0 {
					return nil
				}
				for range b.N {
					if err := errorsJoin(win.Lock(tc.tgt, rma.Exclusive, 0), win.Put(src, tc.tgt, 0), win.Unlock(tc.tgt)); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// BenchmarkSyncPSCW measures one PSCW epoch between two ranks that expose
// to and access each other: Post, Start, one 8-byte put, Complete, Wait.
func BenchmarkSyncPSCW(b *testing.B) {
	syncBench(b, 2, func(w *rma.World, win *rma.Window[int64], src []int64) error {
		peer := []int{1 - w.Rank()}
		for range b.N {
			if err := errorsJoin(win.Post(peer, 0), win.Start(peer, 0), win.Put(src, peer[0], 0), win.Complete(), win.Wait()); err != nil {
				return err
			}
		}
		return nil
	})
}

// BenchmarkSyncFence measures one fence epoch of two ranks, each putting 8
// bytes to the other.
func BenchmarkSyncFence(b *testing.B) {
	syncBench(b, 2, func(w *rma.World, win *rma.Window[int64], src []int64) error {
		peer := 1 - w.Rank()
		if err := win.Fence(0); err != nil {
			return err
		}
		for range b.N {
			if err := errorsJoin(win.Put(src, peer, 0), win.Fence(0)); err != nil {
				return err
			}
		}
		return win.Fence(rma.NoSucceed)
	})
}

// BenchmarkPassiveLeg measures the sending half of the passive-target
// ping-pong's leg (pingpong's lock and lockall modes), without the wait:
// one 8-byte put, Flush, the flag set with Accumulate(Replace); inside
// Lock(Exclusive) and Unlock ("lock") or a LockAll epoch ("lockall").
// Rank 0 of two sends to rank 1, which stays idle.
func BenchmarkPassiveLeg(b *testing.B) {
	for _, all := range []bool{false, true} {
		name := "lock"
		if all {
			name = "lockall"
		}
		b.Run(name, func(b *testing.B) {
			syncBench(b, 2, func(w *rma.World, win *rma.Window[int64], src []int64) error {
				if w.Rank() != 0 {
					return nil
				}
				if all {
					if err := win.LockAll(0); err != nil {
						return err
					}
				}
				flag := []int64{0}
				for i := range b.N {
					flag[0] = int64(i)
					if !all {
						if err := win.Lock(1, rma.Exclusive, 0); err != nil {
							return err
						}
					}
					if err := errorsJoin(win.Put(src, 1, 0), win.Flush(1), win.Accumulate(flag, 1, 1, rma.Replace)); err != nil {
						return err
					}
					if !all {
						if err := win.Unlock(1); err != nil {
							return err
						}
					}
				}
				if all {
					return win.UnlockAll()
				}
				return nil
			})
		})
	}
}

// BenchmarkAwaitLocalReady measures AwaitLocal on a condition that
// already holds: the fixed cost of the wait a passive-target ping-pong's
// reader pays each round trip.
func BenchmarkAwaitLocalReady(b *testing.B) {
	syncBench(b, 1, func(w *rma.World, win *rma.Window[int64], src []int64) error {
		for range b.N {
			if err := win.AwaitLocal(0, func(v int64) bool { return v == 0 }); err != nil {
				return err
			}
		}
		return nil
	})
}
