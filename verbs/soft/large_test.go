package soft

import (
	"bytes"
	"fmt"
	"net"
	"testing"
	"time"

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

// TestPartialPayloadIsProgress: a poller (Progress) that receives part of
// a large write's payload reports progress, as for a frame, so that a rank
// polling its flag (transport.Poller) spins on through a large put
// instead of sleeping between polls and waking late; and the payload lands
// whole once the rest has come.
func TestPartialPayloadIsProgress(t *testing.T) {
	const n = 1 << 20
	b := newSide(t, 2*n)
	conn := rawPeer(t, b.qp)
	d := b.ctx.(*device)
	if d.prog.spinFor <= 0 {
		t.Skip("polling is off (RMAGO_SOFT_SPIN=0)")
	}
	t.Cleanup(d.EndProgress)
	// b's test goroutine takes the progress token, and polls for a small
	// write: from then on it is the poller. (The reader goroutine may
	// still take a frame: the sleeper wakes it for an event that came while
	// the poller held the stream. Then the attempt is made again.)
	d.Progress()
	small := frame{kind: kReqWrite, len: 1, seq: 1, addr: b.mr.Addr(), rkey: b.mr.RKey()}
	rawSend(t, conn, &small, []byte{9})
	q := b.qp.(*qp)
	executed := func(seq uint64) func() bool {
		return func() bool { return q.lastExec.Load() >= seq }
	}
	progressUntil(t, d, "the small write", executed(1))
	for i := range attempts {
		payload := make([]byte, n)
		for k := range payload {
			payload[k] = byte(k*5 + i + 1)
		}
		large := frame{kind: kReqWrite, len: n, seq: uint64(2 + i), addr: b.mr.Addr() + 8, rkey: b.mr.RKey()}
		// The frame begins (which counted as progress before); then
		// more of its payload comes, which is progress too.
		const part = 3 * resumeMin
		rawSend(t, conn, &large, payload[:part])
		begun := progressed(d)
		if _, err := conn.Write(payload[part : 2*part]); err != nil {
			t.Fatal(err)
		}
		saw := begun && progressed(d)
		// The rest, from another goroutine: it may not fit in the
		// sockets' buffers until b reads.
		werr := make(chan error, 1)
		go func() {
			_, err := conn.Write(payload[2*part:])
			werr <- err
		}()
		progressUntil(t, d, "the whole payload", executed(large.seq))
		if err := <-werr; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.buf[8:8+n], payload) {
			t.Fatal("the payload landed wrong")
		}
		if saw {
			return
		}
	}
	t.Fatalf("Progress never reported part of a payload in %d attempts", attempts)
}

// progressed drives d as a poller until a call reports progress, and
// reports whether one did within 100000 calls (else another goroutine
// took the stream).
func progressed(d *device) bool {
	for range 100000 {
		if d.Progress() {
			return true
		}
	}
	return false
}

// rawSend writes frame f and payload to the raw connection.
func rawSend(t *testing.T, conn net.Conn, f *frame, payload []byte) {
	t.Helper()
	var h [hdrLen]byte
	f.encode(&h)
	if _, err := conn.Write(append(h[:], payload...)); err != nil {
		t.Fatal(err)
	}
}

// progressUntil drives d as a poller until done holds.
func progressUntil(t *testing.T, d *device, what string, done func() bool) {
	t.Helper()
	deadline := time.Now().Add(hangBound)
	for !done() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: no progress", what)
		}
		d.Progress()
	}
}
