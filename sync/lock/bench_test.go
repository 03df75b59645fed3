package lock

import (
	"errors"
	"fmt"
	"testing"
)

// BenchmarkLockUnlock measures an uncontended exclusive lock and unlock of
// the rank itself (through the loopback queue pair) and of a peer.
func BenchmarkLockUnlock(b *testing.B) {
	for _, tc := range []struct {
		name   string
		n, tgt int
	}{{"self", 1, 0}, {"peer", 2, 1}} {
		b.Run(tc.name, func(b *testing.B) {
			runJob(b, tc.n, jobOpts{}, func(r *rank) error {
				if r.Me() != 0 {
					return nil
				}
				l := New(r.C)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if err := l.Lock(tc.tgt, true); err != nil {
						b.Error(err)
						return err
					}
					if err := l.Unlock(tc.tgt, true); err != nil {
						b.Error(err)
						return err
					}
				}
				b.StopTimer()
				return nil
			})
		})
	}
}

// BenchmarkMixed: every rank of an in-process job cycles through lock_all,
// an exclusive lock and a shared lock (on targets that move with the
// iteration), as apps/lockmix does with data; one op is one cycle of one
// rank. It measures the protocol under contention, without data.
func BenchmarkMixed(b *testing.B) {
	for _, n := range []int{4, 8} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			runJob(b, n, jobOpts{}, func(r *rank) error {
				l := New(r.C)
				me := r.Me()
				if err := r.F.Barrier(); err != nil {
					return err
				}
				if me == 0 {
					b.ReportAllocs()
					b.ResetTimer()
				}
				for i := range b.N {
					err := errors.Join(l.LockAll(), l.UnlockAll())
					if err == nil {
						tg := (me + i) % n
						err = errors.Join(l.Lock(tg, true), l.Unlock(tg, true))
					}
					if err == nil {
						tg := (me + 2*i + 1) % n
						err = errors.Join(l.Lock(tg, false), l.Unlock(tg, false))
					}
					if err != nil {
						return err
					}
				}
				err := r.F.Barrier()
				if me == 0 {
					b.StopTimer()
				}
				return err
			})
		})
	}
}
