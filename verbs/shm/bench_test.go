package shm

import (
	"testing"
	"time"

	"github.com/rmago/rmago/verbs"
)

// BenchmarkAtomic is a signalled fetch-and-add or compare-and-swap and the
// wait for its completion, to a peer in another context: on shared memory
// (memfd), where the origin runs the CPU atomic on the mapped word, and on
// memory outside any memfd (a created window's Go slice), where the
// owner's responder runs it after a round trip on its socket.
func BenchmarkAtomic(b *testing.B) {
	for _, mem := range []string{"memfd", "created"} {
		for _, op := range []verbs.Opcode{verbs.OpFetchAdd, verbs.OpCompareSwap} {
			b.Run("mem="+mem+"/op="+op.String(), func(b *testing.B) {
				a, tgt := connected(b, 4096)
				mr := tgt.mr
				if mem == "created" {
					mr = tgt.goMR
				}
				// The compare-and-swap finds the word 0 and writes 0: every
				// one swaps.
				wr := verbs.SendWR{Op: op, Flags: verbs.Signaled, SGL: sge(a.mr, 0, 8), RemoteAddr: mr.Addr() + 64, RKey: mr.RKey()}
				if op == verbs.OpFetchAdd {
					wr.CompareAdd = 1
				}
				wc := make([]verbs.WC, 1)
				for b.Loop() {
					if _, err := a.qp.PostSend(&wr); err != nil {
						b.Fatal(err)
					}
					if k, err := a.sendCQ.Wait(wc, time.Time{}); err != nil || k != 1 || wc[0].Status != verbs.StatusSuccess {
						b.Fatal(k, err, wc[0])
					}
				}
			})
		}
	}
}
