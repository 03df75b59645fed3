package soft

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// TestLargeTransfersInPieces: writes and reads from just under the size
// received in pieces (resumeMin) to 8 MiB and odd sizes beyond, at odd
// offsets, land with exact data, whether the reader goroutines receive
// them (no polling) or a waiting goroutine does (payload.go).
func TestLargeTransfersInPieces(t *testing.T) {
	const size = 8<<20 + 64
	sizes := []int{resumeMin - 1, resumeMin, 256<<10 - 1, 256<<10 + 1, 1<<20 + 3, 8 << 20, 8<<20 + 13}
	for _, spin := range []string{"", "100us"} {
		t.Run(fmt.Sprintf("spin=%q", spin), func(t *testing.T) {
			t.Setenv("RMAGO_SOFT_SPIN", spin)
			a, b := connected(t, size)
			for k, n := range sizes {
				for i := range n {
					a.buf[3+i] = byte(i*7 + k*31 + 1)
				}
				wr := verbs.SendWR{ID: uint64(2 * k), Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(3, n), RemoteAddr: b.mr.Addr() + 5, RKey: b.mr.RKey()}
				if _, err := a.qp.PostSend(&wr); err != nil {
					t.Fatal(err)
				}
				if wc := waitOne(t, a.sendCQ); wc.ID != uint64(2*k) || wc.Status != verbs.StatusSuccess {
					t.Fatalf("write of %d bytes: %+v", n, wc)
				}
				if !bytes.Equal(b.buf[5:5+n], a.buf[3:3+n]) {
					t.Fatalf("write of %d bytes: data differs", n)
				}
				// Read it back over what a sent, changed first.
				for i := range n {
					a.buf[3+i] ^= 0xff
				}
				rd := verbs.SendWR{ID: uint64(2*k + 1), Op: verbs.OpRead, Flags: verbs.Signaled, SGL: a.sge(3, n), RemoteAddr: b.mr.Addr() + 5, RKey: b.mr.RKey()}
				if _, err := a.qp.PostSend(&rd); err != nil {
					t.Fatal(err)
				}
				if wc := waitOne(t, a.sendCQ); wc.ID != uint64(2*k+1) || wc.Status != verbs.StatusSuccess {
					t.Fatalf("read of %d bytes: %+v", n, wc)
				}
				if !bytes.Equal(a.buf[3:3+n], b.buf[5:5+n]) {
					t.Fatalf("read of %d bytes: data differs", n)
				}
			}
		})
	}
}
