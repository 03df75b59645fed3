package soft

import (
	"fmt"
	"testing"
	"time"

	"github.com/rmago/rmago/verbs"
)

// BenchmarkAccumulateWait is a signalled accumulate (int64 Sum) of n bytes
// and the wait for its acknowledgement, fetching or not, between two
// contexts over loopback TCP: BenchmarkWriteWait's counterpart.
func BenchmarkAccumulateWait(b *testing.B) {
	for _, n := range benchAccSizes {
		for _, fetch := range []bool{false, true} {
			if fetch && n > maxFetchAcc {
				continue
			}
			b.Run(fmt.Sprintf("bytes=%d/fetch=%v", n, fetch), func(b *testing.B) {
				x, y := connected(b, n)
				b.SetBytes(int64(n))
				wr := verbs.SendWR{Op: verbs.OpAccumulate, Flags: verbs.Signaled, SGL: x.sge(0, n), RemoteAddr: y.mr.Addr(), RKey: y.mr.RKey(),
					Acc: verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int64, Fetch: fetch}}
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
}

var benchAccSizes = []int{8, 16, 24, 32, 64, 128, 512, 1024, 64 << 10, 1 << 20}
