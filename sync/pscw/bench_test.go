package pscw

import "testing"

// BenchmarkEpoch measures one PSCW epoch between two ranks that expose to
// and access each other (Post, Start, one 8-byte put, Complete, Wait).
func BenchmarkEpoch(b *testing.B) {
	runJob(b, 2, jobOpts{}, func(r *rank) error {
		p := New(r.C, 1)
		defer p.Close()
		peer := []int{1 - r.Me()}
		if r.Me() == 0 {
			b.ReportAllocs()
			b.ResetTimer()
		}
		for i := range b.N {
			if err := epoch(r, p, i, peer, peer, false); err != nil {
				b.Error(err)
				return err
			}
		}
		return nil
	})
}
