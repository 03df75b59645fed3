package soft

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// TestReadBeforeRecv: a write with immediate data posted after a read
// completes at the target only once the read's data has left the
// target's memory (verbs.DeviceAttr.ReadsBeforeRecv): the target, which
// overwrites its memory as soon as it has the notification, never
// changes what the read returns. 8 MiB reads do not fit the socket, so
// their responses go through the writer goroutine and the notification
// is held behind them.
func TestReadBeforeRecv(t *testing.T) {
	if !deviceAttr().ReadsBeforeRecv {
		t.Fatal("soft does not claim ReadsBeforeRecv")
	}
	for _, size := range []int{64, 100 << 10, 8 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			a, b := connected(t, size)
			for round := range 4 {
				old, next := byte(2*round+1), byte(2*round+2)
				for i := range b.buf {
					b.buf[i] = old
				}
				rwr := verbs.RecvWR{ID: uint64(round)}
				if _, err := b.qp.PostRecv(&rwr); err != nil {
					t.Fatal(err)
				}
				note := verbs.SendWR{Op: verbs.OpWriteImm, RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), Imm: uint32(round)}
				read := verbs.SendWR{ID: 9, Op: verbs.OpRead, Flags: verbs.Signaled, SGL: a.sge(0, size), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), Next: &note}
				if _, err := a.qp.PostSend(&read); err != nil {
					t.Fatal(err)
				}
				if wc := waitOne(t, b.recvCQ); wc.Status != verbs.StatusSuccess || wc.Imm != uint32(round) {
					t.Fatalf("round %d: notification %+v", round, wc)
				}
				for i := range b.buf { // the epoch is over: the target moves on
					b.buf[i] = next
				}
				if wc := waitOne(t, a.sendCQ); wc.Status != verbs.StatusSuccess || wc.ID != 9 {
					t.Fatalf("round %d: read %+v", round, wc)
				}
				if i := bytes.IndexFunc(a.buf, func(r rune) bool { return r != rune(old) }); i >= 0 {
					t.Fatalf("round %d: the read returned byte %d = %d, want %d (changed after the notification)", round, i, a.buf[i], old)
				}
			}
		})
	}
}
