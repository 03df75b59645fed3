package soft

import (
	"encoding/binary"
	"testing"
	"time"

	"github.com/rmago/rmago/verbs"
)

// heldPair is a connected pair whose b side polls its memory (Progress)
// and holds its answers with no timer to send them unless bounded: b's
// corks and held answers wait for an hour.
func heldPair(t *testing.T, bounded bool) (*side, *side) {
	t.Helper()
	a, b := connected(t, 4096)
	d := b.ctx.(*device)
	if d.prog.spinFor <= 0 {
		t.Skip("polling is off (RMAGO_SOFT_SPIN=0): nothing holds answers")
	}
	t.Cleanup(d.EndProgress) // before the contexts close
	d.corkDelay = time.Hour
	if !bounded {
		d.answerDelay = time.Hour
	}
	return a, b
}

// startPolling makes b's test goroutine its context's poller, as a
// goroutine polling its memory is, and returns once a signalled write from
// a has been answered: from then on only that goroutine runs the frames
// that arrive at b (the sleeper may have run the first one, which woke it).
func startPolling(t *testing.T, a, b *side) {
	t.Helper()
	p := b.ctx.(verbs.Progresser)
	p.Progress()
	w := verbs.SendWR{ID: 100, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(256, 8), RemoteAddr: b.mr.Addr() + 256, RKey: b.mr.RKey()}
	if _, err := a.qp.PostSend(&w); err != nil {
		t.Fatal(err)
	}
	wc := make([]verbs.WC, 1)
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.Progress()
		n, err := a.sendCQ.Poll(wc)
		if err != nil || n == 1 && (wc[0].ID != 100 || wc[0].Status != verbs.StatusSuccess) {
			t.Fatalf("warm-up write: %+v, %v", wc[0], err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("warm-up write never completed")
		}
	}
}

// flagAndAdd posts, from a to b, a write of flag to b's byte 0 and a
// signalled fetch-and-add of 5 to b's word at 8 (old value into a's word
// at 64), in one chain, as a lock's leg sends its flag and its release.
func flagAndAdd(t *testing.T, a, b *side, flag byte) {
	t.Helper()
	a.buf[0] = flag
	add := verbs.SendWR{ID: 2, Op: verbs.OpFetchAdd, Flags: verbs.Signaled, SGL: a.sge(64, 8),
		RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 5}
	put := verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: a.sge(0, 1), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), Next: &add}
	if _, err := a.qp.PostSend(&put); err != nil {
		t.Fatal(err)
	}
}

// pollFor drives b's context as a goroutine polling its own memory does
// until b's byte 0 is flag; it returns with the poll still open (no
// EndProgress).
func pollFor(t *testing.T, b *side, flag byte) {
	t.Helper()
	d := b.ctx.(*device)
	deadline := time.Now().Add(10 * time.Second)
	for d.SyncMemory(); b.buf[0] != flag; d.SyncMemory() {
		if time.Now().After(deadline) {
			t.Fatalf("flag %d never came", flag)
		}
		d.Progress()
	}
}

// wantAdd checks a's fetch-and-add completion and the old value it
// returned.
func wantAdd(t *testing.T, a *side, old uint64) {
	t.Helper()
	if wc := waitOne(t, a.sendCQ); wc.ID != 2 || wc.Status != verbs.StatusSuccess {
		t.Fatalf("fetch-and-add completion %+v", wc)
	}
	if got := binary.LittleEndian.Uint64(a.buf[64:]); got != old {
		t.Fatalf("fetch-and-add returned %d, want %d", got, old)
	}
}

// heldAnswer runs a leg of a lock ping-pong at b: b polls its memory
// until a's flag comes (with the fetch-and-add after it that returns old)
// and reports whether the fetch-and-add's answer was held. The sleeper,
// if a frame woke it before b polled, may run the frames instead (then the
// answer went at once, and this consumes its completion).
func heldAnswer(t *testing.T, a, b *side, flag byte, old uint64) bool {
	t.Helper()
	startPolling(t, a, b)
	flagAndAdd(t, a, b, flag)
	pollFor(t, b, flag)
	if b.qp.(*qp).respHeld.Load() {
		return true
	}
	b.ctx.(verbs.Progresser).EndProgress()
	wantAdd(t, a, old)
	return false
}

// attempts is how many legs a test runs until one has its answer held.
const attempts = 50

// TestHeldAnswerGoesWithRequest: the answer to an atomic that a poller ran
// waits for the poller's next request, and goes with it.
func TestHeldAnswerGoesWithRequest(t *testing.T) {
	a, b := heldPair(t, false)
	binary.LittleEndian.PutUint64(b.buf[8:], 100)
	for i := range uint64(attempts) {
		old := 100 + 5*i
		if !heldAnswer(t, a, b, byte(i+1), old) {
			continue
		}
		wc := make([]verbs.WC, 1)
		for range 100 {
			if n, err := a.sendCQ.Poll(wc); n != 0 || err != nil {
				t.Fatalf("completion before b posted anything: %+v, %v", wc[0], err)
			}
		}
		// b's next request carries the answer.
		b.buf[16] = 42
		w := verbs.SendWR{ID: 9, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: b.sge(16, 1), RemoteAddr: a.mr.Addr() + 128, RKey: a.mr.RKey()}
		if _, err := b.qp.PostSend(&w); err != nil {
			t.Fatal(err)
		}
		if b.qp.(*qp).respHeld.Load() {
			t.Fatal("the answer is still held after b's request")
		}
		wantAdd(t, a, old)
		b.ctx.(verbs.Progresser).EndProgress()
		if wc := waitOne(t, b.sendCQ); wc.ID != 9 || wc.Status != verbs.StatusSuccess {
			t.Fatalf("b's write: %+v", wc)
		}
		a.ctx.(*device).SyncMemory()
		if a.buf[128] != 42 {
			t.Fatalf("b's write did not land: %d", a.buf[128])
		}
		t.Logf("held in leg %d", i+1)
		return
	}
	t.Fatalf("no answer held in %d legs", attempts)
}

// TestHeldAnswerBounded: a poller that found its flag and then does
// nothing still answers, within the bound (answerDelay).
func TestHeldAnswerBounded(t *testing.T) {
	a, b := heldPair(t, true)
	binary.LittleEndian.PutUint64(b.buf[8:], 7)
	held := 0
	for i := range uint64(attempts) {
		if heldAnswer(t, a, b, byte(i+1), 7+5*i) {
			held++
			b.ctx.(verbs.Progresser).EndProgress()
			wantAdd(t, a, 7+5*i)
		}
	}
	if held == 0 {
		t.Fatalf("no answer held in %d legs", attempts)
	}
	t.Logf("%d of %d answers held", held, attempts)
}

// TestHeldAnswerOrder: answers held by a poller leave before any answer
// made later, whoever runs the stream next: a cumulative acknowledgement
// that overtook an atomic's answer would complete the atomic without its
// old value.
func TestHeldAnswerOrder(t *testing.T) {
	a, b := heldPair(t, false)
	binary.LittleEndian.PutUint64(b.buf[8:], 1000)
	for i := range uint64(attempts) {
		old := 1000 + 5*i
		if !heldAnswer(t, a, b, byte(i+1), old) {
			continue
		}
		// b stops polling: its sleeper or reader goroutine runs the next
		// request, a signalled write, and answers it.
		b.ctx.(verbs.Progresser).EndProgress()
		a.buf[32] = 77
		w := verbs.SendWR{ID: 3, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(32, 1), RemoteAddr: b.mr.Addr() + 32, RKey: b.mr.RKey()}
		if _, err := a.qp.PostSend(&w); err != nil {
			t.Fatal(err)
		}
		wantAdd(t, a, old)
		if wc := waitOne(t, a.sendCQ); wc.ID != 3 || wc.Status != verbs.StatusSuccess {
			t.Fatalf("write completion %+v", wc)
		}
		b.ctx.(*device).SyncMemory()
		if b.buf[32] != 77 {
			t.Fatalf("write did not land: %d", b.buf[32])
		}
		return
	}
	t.Fatalf("no answer held in %d legs", attempts)
}

// TestHeldAnswerAtClose: a queue pair closed with answers held sends them
// before its goodbye, so the peer's atomic completes with its old value.
func TestHeldAnswerAtClose(t *testing.T) {
	a, b := heldPair(t, false)
	binary.LittleEndian.PutUint64(b.buf[8:], 30)
	for i := range uint64(attempts) {
		old := 30 + 5*i
		if !heldAnswer(t, a, b, byte(i+1), old) {
			continue
		}
		b.ctx.(verbs.Progresser).EndProgress()
		if err := b.qp.Close(); err != nil {
			t.Fatal(err)
		}
		wantAdd(t, a, old)
		return
	}
	t.Fatalf("no answer held in %d legs", attempts)
}
