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
