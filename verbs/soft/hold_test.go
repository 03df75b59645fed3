package soft

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmago/rmago/verbs"
)

// holdState's window: refusals count it down; traffic left behind again
// doubles it, up to maxHoldWindow; the program coming back resets it.
func TestHoldWindow(t *testing.T) {
	var h holdState
	refusals := func() int {
		n := 0
		for !h.mayHold() {
			n++
		}
		return n
	}
	if n := refusals(); n != 0 {
		t.Fatalf("%d refusals before anything was left behind", n)
	}
	h.leftBehind()
	if n := refusals(); n != minHoldWindow {
		t.Fatalf("%d refusals after traffic was left behind, want %d", n, minHoldWindow)
	}
	h.leftBehind()
	if n := refusals(); n != 2*minHoldWindow {
		t.Fatalf("%d refusals after traffic was left behind twice, want %d", n, 2*minHoldWindow)
	}
	h.cameBack()
	h.leftBehind()
	if n := refusals(); n != minHoldWindow {
		t.Fatalf("%d refusals after the program came back, want %d", n, minHoldWindow)
	}
	for range 20 {
		h.leftBehind()
	}
	if n := refusals(); n != maxHoldWindow {
		t.Fatalf("%d refusals at most, want %d", n, maxHoldWindow)
	}
	h.never = true
	if h.mayHold() {
		t.Fatal("held with polling off")
	}
}

// armed reports whether s's cork timer is set.
func armed(s *side) bool {
	q := s.qp.(*qp)
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	return q.corkArmed
}

// TestLeftBehindSendsAtOnce: a coalesced notification that the program
// leaves behind (nothing posted or polled after it) goes when the cork's
// timer fires, and the context then sends the next ones at once: one
// posted when no timer will send it arrives all the same.
func TestLeftBehindSendsAtOnce(t *testing.T) {
	a, b := corkedPair(t, 64)
	for i := range 2 {
		if _, err := b.qp.PostRecv(&verbs.RecvWR{ID: uint64(10 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	d := a.ctx.(*device)
	d.corkDelay = time.Millisecond
	n1 := verbs.SendWR{ID: 1, Op: verbs.OpWriteImm, Flags: verbs.Coalesce, Imm: 1}
	if _, err := a.qp.PostSend(&n1); err != nil {
		t.Fatal(err)
	}
	if got := corked(a); got != hdrLen {
		t.Fatalf("cork holds %d bytes after a coalesced notification", got)
	}
	if wc := waitOne(t, b.recvCQ); !wc.HasImm || wc.Imm != 1 {
		t.Fatalf("notification %+v", wc)
	}
	for armed(a) { // the timer's function may still be running
		time.Sleep(time.Millisecond)
	}
	if d.hold.off.Load() == 0 {
		t.Fatal("the notification the timer sent was not taken for left behind")
	}
	d.corkDelay = time.Hour
	n2 := verbs.SendWR{ID: 2, Op: verbs.OpWriteImm, Flags: verbs.Coalesce, Imm: 2}
	if _, err := a.qp.PostSend(&n2); err != nil {
		t.Fatal(err)
	}
	if got := corked(a); got != 0 {
		t.Fatalf("cork holds %d bytes after traffic was left behind", got)
	}
	if wc := waitOne(t, b.recvCQ); !wc.HasImm || wc.Imm != 2 {
		t.Fatalf("notification %+v", wc)
	}
}

// TestCameBackKeepsHolding: a coalesced notification that the program's
// next request sends shows that it comes back for what it holds: the
// window goes back to its least, the timer that fires later finds nothing
// left behind, and the next notification waits in the cork again.
func TestCameBackKeepsHolding(t *testing.T) {
	a, b := corkedPair(t, 64)
	for i := range 3 {
		if _, err := b.qp.PostRecv(&verbs.RecvWR{ID: uint64(10 + i)}); err != nil {
			t.Fatal(err)
		}
	}
	d := a.ctx.(*device)
	d.corkDelay = time.Millisecond
	d.hold.window.Store(16 * minHoldWindow) // as after traffic left behind four times
	n1 := verbs.SendWR{ID: 1, Op: verbs.OpWriteImm, Flags: verbs.Coalesce, Imm: 1}
	n2 := verbs.SendWR{ID: 2, Op: verbs.OpWriteImm, Imm: 2} // at once, with the cork
	for _, wr := range []*verbs.SendWR{&n1, &n2} {
		if _, err := a.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
	}
	for _, want := range []uint32{1, 2} {
		if wc := waitOne(t, b.recvCQ); !wc.HasImm || wc.Imm != want {
			t.Fatalf("notification %+v, want %d", wc, want)
		}
	}
	if w := d.hold.window.Load(); w != minHoldWindow {
		t.Fatalf("window %d after the program sent what it held, want %d", w, minHoldWindow)
	}
	for armed(a) {
		time.Sleep(time.Millisecond)
	}
	if n := d.hold.off.Load(); n != 0 {
		t.Fatalf("%d refusals after the program sent what it held", n)
	}
	d.corkDelay = time.Hour
	n3 := verbs.SendWR{ID: 3, Op: verbs.OpWriteImm, Flags: verbs.Coalesce, Imm: 3}
	if _, err := a.qp.PostSend(&n3); err != nil {
		t.Fatal(err)
	}
	if got := corked(a); got != hdrLen {
		t.Fatalf("cork holds %d bytes, want the notification's header", got)
	}
	a.sendCQ.Poll(make([]verbs.WC, 1)) // a poll sends the cork
	if wc := waitOne(t, b.recvCQ); !wc.HasImm || wc.Imm != 3 {
		t.Fatalf("notification %+v", wc)
	}
}

// TestLeftBehindAnswers: answers held for b's next request that are still
// held when the cork's timer fires (run here, as it would be, with
// nothing written since it was set) were left behind; then b holds no
// answer until the window has passed.
func TestLeftBehindAnswers(t *testing.T) {
	a, b := heldPair(t, false)
	d := b.ctx.(*device)
	atomic.StoreUint64(word(b), 500)
	noticed := false
	for i := range uint64(attempts) {
		old := 500 + 5*i
		if !heldAnswer(t, a, b, old) {
			continue
		}
		q := b.qp.(*qp)
		q.sendMu.Lock()
		q.armSends = q.sends.Load() // the timer set with the hold
		q.sendMu.Unlock()
		q.corkExpired()
		b.ctx.(verbs.Progresser).EndProgress()
		wantAdd(t, a, old)
		if d.hold.off.Load() > 0 {
			noticed = true
			break
		}
		// The sleeper or the reader sent the answer first: not left
		// behind; try again.
	}
	if !noticed {
		t.Fatalf("no held answer taken for left behind in %d legs", attempts)
	}
	base := atomic.LoadUint64(word(b))
	for i := range uint64(minHoldWindow / 2) {
		if heldAnswer(t, a, b, base+5*i) {
			t.Fatalf("leg %d: an answer was held after answers were left behind", i)
		}
	}
}

// A context on a node with more ranks than cores, or without polling,
// holds back nothing a peer waits for.
func TestNoHoldWhenCoresShared(t *testing.T) {
	for _, cfg := range []verbs.Config{
		{Secret: secret, ShareCores: true},
		{Secret: secret, Spin: -1},
		{Secret: secret},
	} {
		ctx, err := verbs.Open(Name, "", cfg)
		if err != nil {
			t.Fatal(err)
		}
		d := ctx.(*device)
		want := cfg.ShareCores || cfg.Spin < 0
		if d.hold.never != want {
			t.Errorf("config %+v: never holding is %v, want %v", cfg, d.hold.never, want)
		}
		ctx.Close()
	}
}
