//go:build ibv && linux && cgo

package ibv

import (
	"errors"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/rmago/rmago/verbs"
)

// Tests of CQ.Wait's sleeping phase: arming, the completion channel,
// deadlines, Close waking a waiter, and CQs shared by several queue pairs.

// withSpin fixes CQ.Wait's busy phase for the rest of the test at polls
// (0: every Wait that finds nothing at once sleeps on the channel; -1:
// adaptive, the default).
func withSpin(t *testing.T, polls int) {
	old := fixedSpin
	fixedSpin = polls
	t.Cleanup(func() { fixedSpin = old })
}

// spinName describes a withSpin setting.
func spinName(polls int) string {
	if polls < 0 {
		return "adaptive"
	}
	return strconv.Itoa(polls)
}

// cpuTime is the process's user plus system time.
func cpuTime(t *testing.T) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// TestWaitSleepsAndWakes: a completion that comes long after Wait began
// (so Wait is asleep on the completion channel, or past its busy phase)
// wakes it with exactly that completion. Wake-up delay and CPU are logged.
func TestWaitSleepsAndWakes(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	wr := verbs.SendWR{ID: 7, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: p.a.sge(0, 8), RemoteAddr: p.b.addr(0), RKey: p.b.mr.RKey()}
	wc := make([]verbs.WC, 4)
	for _, spin := range []int{0, -1} {
		withSpin(t, spin)
		const delay = 300 * time.Millisecond
		var posted atomic.Int64
		errc := make(chan error, 1)
		go func() {
			time.Sleep(delay)
			posted.Store(time.Now().UnixNano())
			_, err := p.a.qp.PostSend(&wr)
			errc <- err
		}()
		start, cpu0 := time.Now(), cpuTime(t)
		n, err := p.a.cq.Wait(wc, time.Now().Add(waitFor))
		end, cpu := time.Now(), cpuTime(t)-cpu0
		if perr := <-errc; perr != nil {
			t.Fatal(perr)
		}
		if n != 1 || err != nil || wc[0].ID != 7 || wc[0].Status != verbs.StatusSuccess {
			t.Fatalf("spin %s: Wait: %d, %v, %+v", spinName(spin), n, err, wc[0])
		}
		// Only the outcome is asserted; how fast the wake-up was and how
		// little CPU the sleep cost are measurements, logged here and
		// recorded in docs/rdma.md (no timing thresholds in tests).
		t.Logf("spin %s: waited %v, %v from post to return, %v CPU", spinName(spin),
			end.Sub(start), end.Sub(time.Unix(0, posted.Load())), cpu)
	}
}

// TestWaitDeadline: an empty CQ times out at the deadline, across more
// than one bounded sleep.
func TestWaitDeadline(t *testing.T) {
	ctx := openOrSkip(t)
	cq, err := ctx.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	wc := make([]verbs.WC, 4)
	for _, d := range []time.Duration{0, time.Millisecond, 300 * time.Millisecond, maxBlock + 300*time.Millisecond} {
		start := time.Now()
		n, err := cq.Wait(wc, start.Add(d))
		took := time.Since(start)
		if n != 0 || !errors.Is(err, verbs.ErrTimeout) {
			t.Fatalf("deadline %v: %d, %v", d, n, err)
		}
		// A timeout before the deadline is a bug; how late after it Wait
		// returns is a measurement (logged, not asserted).
		if took < d {
			t.Errorf("deadline %v: timed out early, after %v", d, took)
		}
		t.Logf("deadline %v: returned after %v", d, took)
	}
	if n, err := cq.Wait(wc, time.Now().Add(-time.Second)); n != 0 || !errors.Is(err, verbs.ErrTimeout) {
		t.Errorf("past deadline: %d, %v", n, err)
	}
}

// TestWaitClose: Close refuses while queue pairs use the CQ (which stays
// usable), and wakes a waiter blocked without a deadline.
func TestWaitClose(t *testing.T) {
	ctx := openOrSkip(t)
	pd, err := ctx.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	defer pd.Close()
	cq, err := ctx.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	qp, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := cq.Close(); err == nil || errors.Is(err, verbs.ErrClosed) {
		t.Fatalf("Close with a queue pair attached: %v", err)
	}
	wc := make([]verbs.WC, 4)
	if n, err := cq.Wait(wc, time.Now().Add(10*time.Millisecond)); n != 0 || !errors.Is(err, verbs.ErrTimeout) {
		t.Fatalf("Wait after the refused Close: %d, %v", n, err)
	}
	if err := qp.Close(); err != nil {
		t.Fatal(err)
	}
	for _, spin := range []int{0, -1} {
		withSpin(t, spin)
		cq := cq
		if spin != 0 {
			if cq, err = ctx.CreateCQ(16); err != nil {
				t.Fatal(err)
			}
		}
		type res struct {
			n   int
			err error
		}
		done := make(chan res, 1)
		go func() {
			n, err := cq.Wait(make([]verbs.WC, 4), time.Time{})
			done <- res{n, err}
		}()
		time.Sleep(200 * time.Millisecond)
		select {
		case r := <-done:
			t.Fatalf("Wait returned before Close: %d, %v", r.n, r.err)
		default:
		}
		start := time.Now()
		if err := cq.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
		select {
		case r := <-done:
			if r.n != 0 || !errors.Is(r.err, verbs.ErrClosed) {
				t.Errorf("woken Wait: %d, %v", r.n, r.err)
			}
			t.Logf("spin %s: Close took %v", spinName(spin), time.Since(start))
		case <-time.After(10 * time.Second):
			t.Fatal("Close did not wake the waiter")
		}
		if err := cq.Close(); !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("second Close: %v", err)
		}
		if _, err := cq.Wait(wc, time.Time{}); !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("Wait after Close: %v", err)
		}
		if _, err := cq.Poll(wc); !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("Poll after Close: %v", err)
		}
		if _, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, MaxSendWR: 4, MaxRecvWR: 4}); !errors.Is(err, verbs.ErrClosed) {
			t.Errorf("CreateQP on a closed CQ: %v", err)
		}
	}
}

// sharedCQ connects n initiator queue pairs (send queues depth deep), all
// on one CQ of cqDepth entries, to n responder queue pairs on another,
// within the pair's protection domain and regions.
func sharedCQ(t *testing.T, p *pair, n, depth, cqDepth int) (verbs.CQ, []verbs.QP) {
	t.Helper()
	cq, err := p.ctx.CreateCQ(cqDepth)
	if err != nil {
		t.Fatal(err)
	}
	rcq, err := p.ctx.CreateCQ(n * 4)
	if err != nil {
		t.Fatal(err)
	}
	var qps, all []verbs.QP
	t.Cleanup(func() {
		for _, q := range all {
			q.Close()
		}
		cq.Close()
		rcq.Close()
	})
	for range n {
		a, err := p.pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, MaxSendWR: depth, MaxRecvWR: 1})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, a)
		b, err := p.pd.CreateQP(verbs.QPAttr{SendCQ: rcq, RecvCQ: rcq, MaxSendWR: 4, MaxRecvWR: 1})
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, b)
		if err := a.Connect(b.Endpoint()); err != nil {
			t.Fatal(err)
		}
		if err := b.Connect(a.Endpoint()); err != nil {
			t.Fatal(err)
		}
		qps = append(qps, a)
	}
	return cq, qps
}

// TestWaitSharedCQ: several queue pairs, each posting from its own
// goroutine in bursts with pauses, complete on one CQ drained by one
// waiter that sleeps between bursts. Every completion arrives exactly once.
func TestWaitSharedCQ(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	for _, spin := range []int{0, -1} {
		withSpin(t, spin)
		const nqp, per = 4, 120
		cq, qps := sharedCQ(t, p, nqp, per, nqp*per)
		var wg sync.WaitGroup
		errc := make(chan error, nqp)
		for i, q := range qps {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := range per {
					id := uint64(i*per + j)
					wr := verbs.SendWR{ID: id, Op: verbs.OpWrite, Flags: verbs.Signaled,
						SGL: p.a.sge(int(id)*8, 8), RemoteAddr: p.b.addr(int(id) * 8), RKey: p.b.mr.RKey()}
					if id%3 == 0 {
						wr.Op = verbs.OpFetchAdd
						wr.CompareAdd = 1
					}
					if _, err := q.PostSend(&wr); err != nil {
						errc <- err
						return
					}
					if j%(7+i) == 0 {
						time.Sleep(time.Duration(1+j%5) * time.Millisecond)
					}
				}
			}()
		}
		seen := make([]bool, nqp*per)
		wc := make([]verbs.WC, 8)
		deadline := time.Now().Add(waitFor)
		for got := 0; got < len(seen); {
			n, err := cq.Wait(wc, deadline)
			if err != nil {
				t.Fatalf("spin %s: after %d of %d completions: %v", spinName(spin), got, len(seen), err)
			}
			for _, w := range wc[:n] {
				if w.Status != verbs.StatusSuccess || w.ID >= uint64(len(seen)) || seen[w.ID] {
					t.Fatalf("spin %s: bad or repeated completion %+v", spinName(spin), w)
				}
				seen[w.ID] = true
			}
			got += n
		}
		wg.Wait()
		close(errc)
		for err := range errc {
			t.Fatal(err)
		}
		if n, err := cq.Wait(wc, time.Now().Add(50*time.Millisecond)); n != 0 || !errors.Is(err, verbs.ErrTimeout) {
			t.Fatalf("spin %s: extra completions: %d, %v", spinName(spin), n, err)
		}
	}
}

// TestWaitConcurrentWaiters: several goroutines Wait on one CQ at once (one
// sleeps on the channel, the others spin or queue for it) while another
// posts; every completion is delivered to exactly one of them, and Close
// ends them all.
func TestWaitConcurrentWaiters(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	withSpin(t, 8)
	const waiters, total = 3, 400
	cq, qps := sharedCQ(t, p, 1, 64, total)
	type res struct {
		ids []uint64
		err error
	}
	results := make(chan res, waiters)
	for range waiters {
		go func() {
			var r res
			wc := make([]verbs.WC, 2)
			for {
				n, err := cq.Wait(wc, time.Time{})
				if err != nil {
					r.err = err
					results <- r
					return
				}
				for _, w := range wc[:n] {
					if w.Status != verbs.StatusSuccess {
						r.err = w.Err()
					}
					r.ids = append(r.ids, w.ID)
				}
			}
		}()
	}
	// The CQ holds every completion, so the waiters may lag; a full send
	// queue only makes the poster retry.
	for i := range total {
		wr := verbs.SendWR{ID: uint64(i), Op: verbs.OpWrite, Flags: verbs.Signaled,
			SGL: p.a.sge(i*8, 8), RemoteAddr: p.b.addr(i * 8), RKey: p.b.mr.RKey()}
		for {
			_, err := qps[0].PostSend(&wr)
			if err == nil {
				break
			}
			if !errors.Is(err, verbs.ErrQueueFull) {
				t.Fatal(err)
			}
			time.Sleep(time.Millisecond)
		}
		if i%10 == 0 {
			time.Sleep(2 * time.Millisecond)
		}
	}
	// Let the waiters drain, then close: that wakes and ends them.
	time.Sleep(500 * time.Millisecond)
	if err := qps[0].Close(); err != nil {
		t.Fatal(err)
	}
	// The responder QP is on another CQ; only the initiator uses cq.
	if err := cq.Close(); err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, total)
	count := 0
	for range waiters {
		select {
		case r := <-results:
			if !errors.Is(r.err, verbs.ErrClosed) {
				t.Errorf("waiter ended with %v", r.err)
			}
			for _, id := range r.ids {
				if id >= total || seen[id] {
					t.Fatalf("completion %d out of range or delivered twice", id)
				}
				seen[id] = true
				count++
			}
		case <-time.After(waitFor):
			t.Fatal("waiters not ended by Close")
		}
	}
	if count != total {
		t.Fatalf("%d of %d completions delivered", count, total)
	}
}

// TestWakeLatency logs how long a waiter asleep on the completion channel
// takes to return once another goroutine has posted the request that
// completes (the post itself included).
func TestWakeLatency(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	wr := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: p.a.sge(0, 8), RemoteAddr: p.b.addr(0), RKey: p.b.mr.RKey()}
	wc := make([]verbs.WC, 1)
	for _, spin := range []int{0, -1} {
		withSpin(t, spin)
		const iters = 40
		lat := make([]time.Duration, iters)
		for i := range lat {
			var posted atomic.Int64
			go func() {
				time.Sleep(5 * time.Millisecond)
				posted.Store(time.Now().UnixNano())
				p.a.qp.PostSend(&wr)
			}()
			if n, err := p.a.cq.Wait(wc, time.Now().Add(waitFor)); n != 1 || err != nil {
				t.Fatal(n, err)
			}
			lat[i] = time.Since(time.Unix(0, posted.Load()))
		}
		slices.Sort(lat)
		t.Logf("spin %s: post by another goroutine to Wait's return: median %v, p90 %v, max %v", spinName(spin), lat[iters/2], lat[iters*9/10], lat[iters-1])
	}
}

// TestSpinCost logs what one step of Wait's busy phase costs here: a Poll
// of an empty CQ and a runtime.Gosched.
func TestSpinCost(t *testing.T) {
	ctx := openOrSkip(t)
	cq, err := ctx.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	defer cq.Close()
	wc := make([]verbs.WC, 4)
	const k = 20000
	start := time.Now()
	for range k {
		runtime.Gosched()
		if n, err := cq.Poll(wc); n != 0 || err != nil {
			t.Fatal(n, err)
		}
	}
	step := time.Since(start) / k
	start = time.Now()
	for range k / 10 {
		_ = time.Now()
	}
	t.Logf("Poll+Gosched on an empty CQ: %v; time.Now: %v", step, time.Since(start)/(k/10))
}

// TestSleepEstimate: the sleep-cost estimate settles near the lower
// quartile of the durations, from any start, and a few very short sleeps
// (an event that was already pending) barely move it.
func TestSleepEstimate(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	uniform := func() int64 { return 100_000 + rng.Int64N(1_000_000) } // 100 µs to 1.1 ms: quartile 350 µs
	for _, start := range []int64{0, 1, 5_000_000} {
		est := start
		for range 3000 {
			est = nextSleep(est, uniform())
		}
		// Steps of 1/16 make it wander: ±45% over 500 seeds.
		if est < 200_000 || est > 550_000 {
			t.Errorf("from %d ns: estimate %d ns, want about 350 µs", start, est)
		}
	}
	est := int64(0)
	for i := range 3000 {
		s := uniform()
		if i%20 == 0 {
			s = 1000
		}
		est = nextSleep(est, s)
	}
	if est < 250_000 {
		t.Errorf("with 5%% 1 µs sleeps: estimate %d ns", est)
	}
	// Never above the largest sample, never zero.
	if e := nextSleep(100, 50_000_000); e > 100+100/16 {
		t.Errorf("one long sleep moved 100 ns to %d", e)
	}
	if e := nextSleep(2, 0); e < 1 {
		t.Errorf("estimate %d", e)
	}
	if st := nextStep(nextStep(0, 4000), 2000); st != 3750 {
		t.Errorf("step average %d, want 3750", st)
	}
}

// TestSpinAdapts: with the adaptive busy phase, waits that end in sleeps
// teach the CQ what a sleep and a poll cost here, and the busy phase stays
// within its bounds.
func TestSpinAdapts(t *testing.T) {
	p := newPair(t, openOrSkip(t))
	withSpin(t, -1)
	q := p.a.cq.(*cq)
	if got := q.spinBudget(); got != minSpin {
		t.Fatalf("fresh CQ: busy phase %d polls, want %d", got, minSpin)
	}
	wr := verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: p.a.sge(0, 8), RemoteAddr: p.b.addr(0), RKey: p.b.mr.RKey()}
	wc := make([]verbs.WC, 1)
	for range 40 {
		go func() {
			time.Sleep(2 * time.Millisecond)
			p.a.qp.PostSend(&wr)
		}()
		if n, err := p.a.cq.Wait(wc, time.Now().Add(waitFor)); n != 1 || err != nil {
			t.Fatal(n, err)
		}
	}
	sl, st, b := q.sleepNs.Load(), q.stepNs.Load(), q.spinBudget()
	t.Logf("sleep cost %v, busy-phase step %v: busy phase %d polls", time.Duration(sl), time.Duration(st), b)
	if sl <= 0 || st <= 0 || b < minSpin || b > maxSpin {
		t.Errorf("sleep %d ns, step %d ns, busy phase %d polls", sl, st, b)
	}
}
