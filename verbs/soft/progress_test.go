package soft

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/verbs"
)

// Tests of the receive engine driven by waiting goroutines (rx.go).

// TestSpinSetting: RMAGO_SOFT_SPIN is a duration; anything else is refused.
func TestSpinSetting(t *testing.T) {
	for _, v := range []string{"x", "-1ms", "10"} {
		t.Setenv("RMAGO_SOFT_SPIN", v)
		if _, err := verbs.Open(Name, "", verbs.Config{Secret: secret}); !errors.Is(err, verbs.ErrInvalid) {
			t.Errorf("RMAGO_SOFT_SPIN=%q: %v", v, err)
		}
	}
	t.Setenv("RMAGO_SOFT_SPIN", "250us")
	ctx, err := verbs.Open(Name, "", verbs.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer ctx.Close()
	if got := ctx.(*context).prog.spinFor; got != 250*time.Microsecond {
		t.Errorf("spin %v", got)
	}
}

// TestCrossTraffic: both sides read and write each other's memory at once
// (large reads make responses that fill the socket, so non-blocking
// responses fall back to the writer goroutine part way), each waiting
// goroutine driving its receive engine, with spinning off, short and long.
// Every byte arrives where it should and nothing deadlocks.
func TestCrossTraffic(t *testing.T) {
	for _, spin := range []string{"0", "20us", "5ms"} {
		t.Run("spin="+spin, func(t *testing.T) {
			t.Setenv("RMAGO_SOFT_SPIN", spin)
			const size, chunk = 8 << 20, 1 << 20
			a, b := connected(t, size)
			for i := range size / 2 {
				a.buf[i] = byte(i*3 + 1)
				b.buf[i] = byte(i*5 + 2)
			}
			var wg sync.WaitGroup
			errs := make([]error, 2)
			for k, pair := range [][2]*side{{a, b}, {b, a}} {
				wg.Add(1)
				go func() {
					defer wg.Done()
					errs[k] = cross(pair[0], pair[1], size, chunk)
				}()
			}
			wg.Wait()
			for k, err := range errs {
				if err != nil {
					t.Fatalf("side %d: %v", k, err)
				}
			}
			// cross checked the reads; here the writes.
			for _, pair := range [][2]*side{{a, b}, {b, a}} {
				from, to := pair[0], pair[1]
				if !bytes.Equal(to.buf[size/2+size/4:size], from.buf[size/4:size/2]) {
					t.Fatal("written data differs")
				}
			}
		})
	}
}

// cross reads the peer's first quarter (in chunks) into the second half of
// me, and writes my second quarter into the peer's last quarter, all
// posted before waiting, then checks the reads.
func cross(me, peer *side, size, chunk int) error {
	n := 0
	for off := 0; off < size/4; off += chunk {
		rd := verbs.SendWR{ID: uint64(off), Op: verbs.OpRead, Flags: verbs.Signaled,
			SGL: me.sge(size/2+off, chunk), RemoteAddr: peer.mr.Addr() + uint64(off), RKey: peer.mr.RKey()}
		wr := verbs.SendWR{ID: uint64(off) + 1, Op: verbs.OpWrite, Flags: verbs.Signaled,
			SGL: me.sge(size/4+off, chunk), RemoteAddr: peer.mr.Addr() + uint64(size/2+size/4+off), RKey: peer.mr.RKey()}
		rd.Next = &wr
		if _, err := me.qp.PostSend(&rd); err != nil {
			return err
		}
		n += 2
	}
	wc := make([]verbs.WC, 4)
	deadline := time.Now().Add(time.Minute)
	for n > 0 {
		k, err := me.sendCQ.Wait(wc, deadline)
		if err != nil {
			return fmt.Errorf("%d completions missing: %w", n, err)
		}
		for _, w := range wc[:k] {
			if w.Status != verbs.StatusSuccess {
				return fmt.Errorf("completion %+v", w)
			}
		}
		n -= k
	}
	if !bytes.Equal(me.buf[size/2:size/2+size/4], peer.buf[:size/4]) {
		return errors.New("read data differs")
	}
	return nil
}
