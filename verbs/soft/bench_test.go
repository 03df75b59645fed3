package soft

import (
	"fmt"
	"testing"
	"time"

	"github.com/rmago/rmago/verbs"
)

// BenchmarkWriteWait is the soft provider's data path: a signalled write
// of n bytes and the wait for its acknowledgement (a put+flush), between
// two contexts over loopback TCP.
func BenchmarkWriteWait(b *testing.B) {
	for _, n := range []int{8, 4096, 64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("bytes=%d", n), func(b *testing.B) {
			x, y := connected(b, n)
			b.SetBytes(int64(n))
			wr := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: x.sge(0, n), RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
			wc := make([]verbs.WC, 1)
			for b.Loop() {
				if _, err := x.qp.PostSend(&wr); err != nil {
					b.Fatal(err)
				}
				if k, err := x.sendCQ.Wait(wc, time.Time{}); err != nil || k != 1 || wc[0].Status != verbs.StatusSuccess {
					b.Fatal(k, err, wc[0])
				}
			}
		})
	}
}

// BenchmarkFetchAdd is a signalled fetch-and-add and the wait for its old
// value: to a peer over loopback TCP (the responder's atomic), and between
// two queue pairs of one context (the loopback pair, which runs the same
// atomic at post time).
func BenchmarkFetchAdd(b *testing.B) {
	run := func(b *testing.B, q verbs.QP, cq verbs.CQ, local []verbs.SGE, mr verbs.MR) {
		wr := verbs.SendWR{Op: verbs.OpFetchAdd, Flags: verbs.Signaled, SGL: local, RemoteAddr: mr.Addr(), RKey: mr.RKey(), CompareAdd: 1}
		wc := make([]verbs.WC, 1)
		for b.Loop() {
			if _, err := q.PostSend(&wr); err != nil {
				b.Fatal(err)
			}
			if k, err := cq.Wait(wc, time.Time{}); err != nil || k != 1 || wc[0].Status != verbs.StatusSuccess {
				b.Fatal(k, err, wc[0])
			}
		}
	}
	b.Run("peer", func(b *testing.B) {
		x, y := connected(b, 64)
		run(b, x.qp, x.sendCQ, x.sge(8, 8), y.mr)
	})
	b.Run("loopback", func(b *testing.B) {
		s, a, _ := loopPair(b)
		run(b, a, s.sendCQ, s.sge(8, 8), s.mr)
	})
}

// BenchmarkWriteStream is an OSU-style put bandwidth window: 32 unsignalled
// writes of n bytes to consecutive addresses, then a signalled empty write
// and the wait for it (a flush). The soft provider sends the small ones
// together (coalesce.go).
func BenchmarkWriteStream(b *testing.B) {
	const window = 32 // and the flush: the test queue pairs are 64 deep
	for _, n := range []int{8, 1024} {
		b.Run(fmt.Sprintf("bytes=%d", n), func(b *testing.B) {
			x, y := connected(b, window*n)
			b.SetBytes(int64(window * n))
			wrs := make([]verbs.SendWR, window)
			sges := make([]verbs.SGE, window)
			for i := range wrs {
				sges[i] = verbs.SGE{Addr: x.mr.Addr() + uint64(i*n), Length: uint32(n), LKey: x.mr.LKey()}
				wrs[i] = verbs.SendWR{Op: verbs.OpWrite, SGL: sges[i : i+1], RemoteAddr: y.mr.Addr() + uint64(i*n), RKey: y.mr.RKey()}
			}
			flush := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey()}
			wc := make([]verbs.WC, 1)
			for b.Loop() {
				for i := range wrs {
					if _, err := x.qp.PostSend(&wrs[i]); err != nil {
						b.Fatal(err)
					}
				}
				if _, err := x.qp.PostSend(&flush); err != nil {
					b.Fatal(err)
				}
				if k, err := x.sendCQ.Wait(wc, time.Time{}); err != nil || k != 1 || wc[0].Status != verbs.StatusSuccess {
					b.Fatal(k, err, wc[0])
				}
			}
		})
	}
}
