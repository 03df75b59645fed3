package lock

import "testing"

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
