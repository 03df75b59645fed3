package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/verbs"
)

// Tests of the receive engine driven by waiting goroutines (rx.go).

// TestSpinSetting: verbs.Config.Spin sets the polling time (0: DefaultSpin,
// negative: none), and ShareCores whether a spinner yields its core to
// other processes; RMAGO_SOFT_SPIN reaches it as transport passes it
// (envConfig), and a bad value is refused before any context opens.
func TestSpinSetting(t *testing.T) {
	for _, c := range []struct {
		spin, want time.Duration
		share      bool
	}{{0, DefaultSpin, false}, {-1, 0, false}, {250 * time.Microsecond, 250 * time.Microsecond, true}} {
		ctx, err := verbs.Open(Name, "", verbs.Config{Secret: secret, Spin: c.spin, ShareCores: c.share})
		if err != nil {
			t.Fatal(err)
		}
		if g := &ctx.(*device).prog; g.spinFor != c.want || g.shareCores != c.share {
			t.Errorf("Config.Spin %v, ShareCores %v: spin %v yielding to processes %v", c.spin, c.share, g.spinFor, g.shareCores)
		}
		ctx.Close()
	}
	for _, v := range []string{"x", "-1ms", "10"} {
		t.Setenv("RMAGO_SOFT_SPIN", v)
		if _, err := envConfig(); !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "RMAGO_SOFT_SPIN") {
			t.Errorf("RMAGO_SOFT_SPIN=%q: %v", v, err)
		}
	}
	for v, want := range map[string]time.Duration{"250us": 250 * time.Microsecond, "0": 0, "": DefaultSpin} {
		t.Setenv("RMAGO_SOFT_SPIN", v)
		if got := newSide(t, 64).ctx.(*device).prog.spinFor; got != want {
			t.Errorf("RMAGO_SOFT_SPIN=%q: spin %v, want %v", v, got, want)
		}
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

// TestChainInOneWrite: a chain longer than one batch (two gather writes), mixing writes, reads,
// atomics and a fenced read that must wait for the reads before it (which
// are still in the batch when it is posted), completes in order with the
// right data.
func TestChainInOneWrite(t *testing.T) {
	a, b := connected(t, 4096)
	const n = postBatch + 20 // the send queue holds 64
	wrs := make([]verbs.SendWR, n)
	for i := range wrs {
		w := &wrs[i]
		w.ID, w.Flags, w.RKey = uint64(i), verbs.Signaled, b.mr.RKey()
		switch i % 3 {
		case 0: // write byte i to b[i]
			a.buf[i] = byte(i)
			w.Op, w.SGL, w.RemoteAddr = verbs.OpWrite, a.sge(i, 1), b.mr.Addr()+uint64(i)
		case 1: // read b[i-1] (just written) into a[1024+i]
			w.Op, w.SGL, w.RemoteAddr = verbs.OpRead, a.sge(1024+i, 1), b.mr.Addr()+uint64(i-1)
		case 2: // add 1 to the counter at b[2048], old value to a[2048+8i]
			w.Op, w.SGL, w.RemoteAddr, w.CompareAdd = verbs.OpFetchAdd, a.sge(2048+8*i, 8), b.mr.Addr()+2048, 1
		}
		if i == n-1 {
			w.Flags |= verbs.Fence
		}
		if i > 0 {
			wrs[i-1].Next = w
		}
	}
	if bad, err := a.qp.PostSend(&wrs[0]); err != nil {
		t.Fatalf("post: %v at %v", err, bad.ID)
	}
	wc := make([]verbs.WC, 16)
	for got := 0; got < n; {
		k, err := a.sendCQ.Wait(wc, time.Now().Add(10*time.Second))
		if err != nil {
			t.Fatalf("after %d completions: %v", got, err)
		}
		for _, w := range wc[:k] {
			if w.Status != verbs.StatusSuccess || w.ID != uint64(got) {
				t.Fatalf("completion %d: %+v", got, w)
			}
			got++
		}
	}
	adds := uint64(0)
	for i := range n {
		switch i % 3 {
		case 1:
			if a.buf[1024+i] != byte(i-1) {
				t.Fatalf("read %d: %d", i, a.buf[1024+i])
			}
		case 2:
			if old := binary.LittleEndian.Uint64(a.buf[2048+8*i:]); old != adds {
				t.Fatalf("fetch-add %d: old %d, want %d", i, old, adds)
			}
			adds++
		}
	}
	if got := binary.LittleEndian.Uint64(b.buf[2048:]); got != adds {
		t.Fatalf("counter %d, want %d", got, adds)
	}
}

// TestPartialResponseNotInterleaved: while one side posts a stream of small
// writes, its receive engine answers the other side's large reads, whose
// responses fill the socket and are written in part without blocking. The
// rest of a partly written response must follow before any request frame,
// or the stream is corrupt. Every read returns the right bytes and every
// write lands.
func TestPartialResponseNotInterleaved(t *testing.T) {
	const size, chunk, reads, writes = 32 << 20, 6 << 20, 30, 20000
	a, b := connected(t, size)
	for i := range size / 2 {
		a.buf[i] = byte(i*7 + 3)
	}
	errc := make(chan error, 2)
	go func() { // a: a stream of small signalled writes into b's upper half
		wc := make([]verbs.WC, 16)
		outstanding := 0
		for i := range writes {
			off := size/2 + (i%1024)*64
			a.buf[off] = byte(i)
			wr := verbs.SendWR{ID: uint64(i), Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(off, 64), RemoteAddr: b.mr.Addr() + uint64(off), RKey: b.mr.RKey()}
			// Keep the CQ drained as completions come.
			k, err := a.sendCQ.Poll(wc)
			if err != nil {
				errc <- err
				return
			}
			outstanding -= k
			for {
				_, err := a.qp.PostSend(&wr)
				if err == nil {
					outstanding++
					break
				}
				if !errors.Is(err, verbs.ErrQueueFull) {
					errc <- err
					return
				}
				k, err := a.sendCQ.Wait(wc, time.Now().Add(time.Minute))
				if err != nil {
					errc <- err
					return
				}
				outstanding -= k
			}
		}
		for outstanding > 0 {
			k, err := a.sendCQ.Wait(wc, time.Now().Add(time.Minute))
			if err != nil {
				errc <- err
				return
			}
			for _, w := range wc[:k] {
				if w.Status != verbs.StatusSuccess {
					errc <- fmt.Errorf("write: %+v", w)
					return
				}
			}
			outstanding -= k
		}
		errc <- nil
	}()
	go func() { // b: large reads of a's lower half
		wc := make([]verbs.WC, 4)
		for i := range reads {
			off := (i * chunk / 2) % (size/2 - chunk)
			wr := verbs.SendWR{ID: uint64(i), Op: verbs.OpRead, Flags: verbs.Signaled, SGL: b.sge(0, chunk), RemoteAddr: a.mr.Addr() + uint64(off), RKey: a.mr.RKey()}
			if _, err := b.qp.PostSend(&wr); err != nil {
				errc <- err
				return
			}
			k, err := b.sendCQ.Wait(wc, time.Now().Add(time.Minute))
			if err != nil || k != 1 || wc[0].Status != verbs.StatusSuccess {
				errc <- fmt.Errorf("read %d: %d, %v, %+v", i, k, err, wc[0])
				return
			}
			if !bytes.Equal(b.buf[:chunk], a.buf[off:off+chunk]) {
				errc <- fmt.Errorf("read %d: data differs", i)
				return
			}
		}
		errc <- nil
	}()
	for range 2 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
}

// TestSpinCheck: a polling waiter stops at its deadline even when every
// look found frames (before, frames that kept coming pushed the spin's end
// back past the deadline, and a 3 s wait under a peer's steady lock traffic
// took up to 7 s: the fault suite's close faults with polling on); frames
// push the end back to the spin time, never beyond the deadline; with no
// frames it stops once the end has passed.
func TestSpinCheck(t *testing.T) {
	g := &progress{spinFor: 100 * time.Microsecond}
	q := &cq{}
	t0 := time.Unix(1000, 0)
	us := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Microsecond) }
	for _, c := range []struct {
		name          string
		now           time.Time
		ran           int
		end, deadline time.Time
		wantEnd       time.Time
		wantStop      bool
	}{
		{"frames, past the deadline", us(500), 3, us(550), us(400), us(550), true},
		{"frames, before the deadline", us(300), 3, us(320), us(400), us(400), false},
		{"frames, no deadline", us(300), 1, us(320), time.Time{}, us(400), false},
		{"frames, deadline far", us(300), 1, us(320), us(9000), us(400), false},
		{"no frames, spin left", us(300), 0, us(320), us(9000), us(320), false},
		{"no frames, spin over", us(330), 0, us(320), us(9000), us(320), true},
		{"no frames, past the deadline", us(500), 0, us(9000), us(400), us(9000), true},
	} {
		end, stop := g.spinCheck(q, c.now, c.ran, c.end, c.deadline)
		if stop != c.wantStop || (!stop && !end.Equal(c.wantEnd)) {
			t.Errorf("%s: end %v stop %v, want end %v stop %v", c.name, end.Sub(t0), stop, c.wantEnd.Sub(t0), c.wantStop)
		}
	}
}
