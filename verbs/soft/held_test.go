package soft

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

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

// postAdd posts, from a to b, a signalled fetch-and-add of 5 to b's word
// at 8, the old value into a's word at 64: the last request of a lock's
// leg, its release.
func postAdd(t *testing.T, a, b *side) {
	t.Helper()
	add := verbs.SendWR{ID: 2, Op: verbs.OpFetchAdd, Flags: verbs.Signaled, SGL: a.sge(64, 8),
		RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), CompareAdd: 5}
	if _, err := a.qp.PostSend(&add); err != nil {
		t.Fatal(err)
	}
}

// word is b's word at 8, which the fetch-and-adds change (atomically, at
// the responder, so the test reads it atomically).
func word(b *side) *uint64 { return (*uint64)(unsafe.Pointer(&b.buf[8])) }

// pollFor drives b's context as a goroutine polling its own memory does
// until b's word at 8 is want; it returns with the poll still open (no
// EndProgress).
func pollFor(t *testing.T, b *side, want uint64) {
	t.Helper()
	progressUntil(t, b.ctx.(*device), fmt.Sprintf("the word becoming %d", want),
		func() bool { return atomic.LoadUint64(word(b)) == want })
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
// until a's fetch-and-add (which returns old) has changed it, and reports
// whether the fetch-and-add's answer was held. The sleeper,
// if a frame woke it before b polled, may run the frames instead (then the
// answer went at once, and this consumes its completion).
func heldAnswer(t *testing.T, a, b *side, old uint64) bool {
	t.Helper()
	startPolling(t, a, b)
	postAdd(t, a, b)
	pollFor(t, b, old+5)
	if b.qp.(*qp).respHeld.Load() {
		return true
	}
	b.ctx.(verbs.Progresser).EndProgress()
	wantAdd(t, a, old)
	return false
}

// attempts is how many legs a test runs until one has its answer held.
const attempts = 50

// onHeld runs legs from old value base until one has its answer held at
// b, then calls then with the old value that answer carries.
func onHeld(t *testing.T, a, b *side, base uint64, then func(old uint64)) {
	t.Helper()
	atomic.StoreUint64(word(b), base)
	for i := range uint64(attempts) {
		if heldAnswer(t, a, b, base+5*i) {
			then(base + 5*i)
			return
		}
	}
	t.Fatalf("no answer held in %d legs", attempts)
}

// postByte posts a signalled write of v from from's byte off to to's byte
// off, with ID id.
func postByte(t *testing.T, from, to *side, off int, v byte, id uint64) {
	t.Helper()
	from.buf[off] = v
	w := verbs.SendWR{ID: id, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: from.sge(off, 1), RemoteAddr: to.mr.Addr() + uint64(off), RKey: to.mr.RKey()}
	if _, err := from.qp.PostSend(&w); err != nil {
		t.Fatal(err)
	}
}

// wroteByte waits for the completion of postByte's write and checks that
// it landed.
func wroteByte(t *testing.T, from, to *side, off int, v byte, id uint64) {
	t.Helper()
	if wc := waitOne(t, from.sendCQ); wc.ID != id || wc.Status != verbs.StatusSuccess {
		t.Fatalf("write %d: %+v", id, wc)
	}
	to.ctx.(*device).SyncMemory()
	if to.buf[off] != v {
		t.Fatalf("write %d did not land: %d", id, to.buf[off])
	}
}

// TestHeldAnswerGoesWithRequest: the answer to an atomic that a poller ran
// waits for the poller's next request, and goes with it.
func TestHeldAnswerGoesWithRequest(t *testing.T) {
	a, b := heldPair(t, false)
	atomic.StoreUint64(word(b), 100)
	for i := range uint64(attempts) {
		old := 100 + 5*i
		if !heldAnswer(t, a, b, old) || sentByOther(t, a, b, old) {
			continue
		}
		// b's next request carries the answer.
		postByte(t, b, a, 128, 42, 9)
		if b.qp.(*qp).respHeld.Load() {
			t.Fatal("the answer is still held after b's request")
		}
		wantAdd(t, a, old)
		b.ctx.(verbs.Progresser).EndProgress()
		wroteByte(t, b, a, 128, 42, 9)
		return
	}
	t.Fatalf("no answer held until b's request in %d legs", attempts)
}

// sentByOther polls a for the answer held at b, which must not come while
// it is held, and reports whether it came: another goroutine of b ran the
// stream and sent it, as it must (the sleeper or the reader, woken by an
// event for data the poller took). Then the poll ends and the leg is over.
func sentByOther(t *testing.T, a, b *side, old uint64) bool {
	t.Helper()
	wc := make([]verbs.WC, 1)
	for range 100 {
		n, err := a.sendCQ.Poll(wc)
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			continue
		}
		// sendResponses lets go of the answers before it writes them.
		if b.qp.(*qp).respHeld.Load() {
			t.Fatalf("completion while the answer is held: %+v", wc[0])
		}
		if wc[0].ID != 2 || wc[0].Status != verbs.StatusSuccess {
			t.Fatalf("fetch-and-add completion %+v", wc[0])
		}
		if got := binary.LittleEndian.Uint64(a.buf[64:]); got != old {
			t.Fatalf("fetch-and-add returned %d, want %d", got, old)
		}
		b.ctx.(verbs.Progresser).EndProgress()
		return true
	}
	return false
}

// TestHeldAnswerBounded: a poller that found its flag and then does
// nothing still answers, within the bound (answerDelay).
func TestHeldAnswerBounded(t *testing.T) {
	a, b := heldPair(t, true)
	atomic.StoreUint64(word(b), 7)
	held := 0
	for i := range uint64(attempts) {
		if heldAnswer(t, a, b, 7+5*i) {
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
	onHeld(t, a, b, 1000, func(old uint64) {
		// b stops polling: its sleeper or reader goroutine runs the next
		// request, a signalled write, and answers it.
		b.ctx.(verbs.Progresser).EndProgress()
		postByte(t, a, b, 32, 77, 3)
		wantAdd(t, a, old)
		wroteByte(t, a, b, 32, 77, 3)
	})
}

// TestHeldAnswerAtClose: a queue pair closed with answers held sends them
// before its goodbye, so the peer's atomic completes with its old value.
func TestHeldAnswerAtClose(t *testing.T) {
	a, b := heldPair(t, false)
	onHeld(t, a, b, 30, func(old uint64) {
		b.ctx.(verbs.Progresser).EndProgress()
		if err := b.qp.Close(); err != nil {
			t.Fatal(err)
		}
		wantAdd(t, a, old)
	})
}

// TestHeldReadGoesWithRequest: a goroutine waiting on a completion queue
// that runs a small read together with the notification it waited for
// keeps the read's answer for its next request, which carries it; the
// answer holds the data as it was when the read ran (copied then).
func TestHeldReadGoesWithRequest(t *testing.T) {
	a, b := heldPair(t, false)
	q := b.qp.(*qp)
	wc := make([]verbs.WC, 1)
	const tries = 4 * attempts
	for i := range tries {
		if _, err := b.qp.PostRecv(&verbs.RecvWR{ID: uint64(100 + i)}); err != nil {
			t.Fatal(err)
		}
		v := byte(i + 1)
		b.buf[512] = v
		read := verbs.SendWR{ID: 1, Op: verbs.OpRead, Flags: verbs.Signaled, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr() + 512, RKey: b.mr.RKey()}
		note := verbs.SendWR{ID: 2, Op: verbs.OpWriteImm, Imm: uint32(i)}
		read.Next = &note
		if _, err := a.qp.PostSend(&read); err != nil {
			t.Fatal(err)
		}
		if n, err := b.recvCQ.Wait(wc, time.Now().Add(10*time.Second)); n != 1 || err != nil || wc[0].Imm != uint32(i) {
			t.Fatalf("notification: %d %+v %v", n, wc[0], err)
		}
		if !q.respHeld.Load() {
			// Another goroutine ran the frames, or they came apart: the
			// answer went at once.
			if c := waitOne(t, a.sendCQ); c.ID != 1 || c.Status != verbs.StatusSuccess || a.buf[0] != v {
				t.Fatalf("read %+v brought %d, want %d", c, a.buf[0], v)
			}
			// A reader goroutine that ran them polls on for the spin
			// time, and keeps the frames from the waiter until it stops.
			time.Sleep(time.Millisecond)
			continue
		}
		b.buf[512] = v + 100 // after the read ran: not in its answer
		postByte(t, b, a, 128, 42, 9)
		if q.respHeld.Load() {
			t.Fatal("the answer is still held after b's request")
		}
		if c := waitOne(t, a.sendCQ); c.ID != 1 || c.Status != verbs.StatusSuccess || a.buf[0] != v {
			t.Fatalf("held read %+v brought %d, want %d", c, a.buf[0], v)
		}
		wroteByte(t, b, a, 128, 42, 9)
		return
	}
	t.Fatalf("no read answer held in %d attempts", tries)
}

// TestReadAnsweredWhileWaiting: a read that a goroutine waiting on its
// completion queue runs, without the completion it waits for, is
// answered at once (no timer would send it here), while it goes on
// waiting.
func TestReadAnsweredWhileWaiting(t *testing.T) {
	a, b := heldPair(t, false)
	if _, err := b.qp.PostRecv(&verbs.RecvWR{ID: 1}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		wc := make([]verbs.WC, 1)
		_, err := b.recvCQ.Wait(wc, time.Now().Add(20*time.Second))
		done <- err
	}()
	for i := range 20 {
		v := byte(i + 1)
		b.buf[600] = v
		read := verbs.SendWR{ID: uint64(10 + i), Op: verbs.OpRead, Flags: verbs.Signaled, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr() + 600, RKey: b.mr.RKey()}
		if _, err := a.qp.PostSend(&read); err != nil {
			t.Fatal(err)
		}
		if c := waitOne(t, a.sendCQ); c.ID != uint64(10+i) || c.Status != verbs.StatusSuccess || a.buf[0] != v {
			t.Fatalf("read %+v brought %d, want %d", c, a.buf[0], v)
		}
	}
	note := verbs.SendWR{ID: 99, Op: verbs.OpWriteImm, Imm: 5}
	if _, err := a.qp.PostSend(&note); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestHeldEmptyReadReturnsBuffer: a zero-length read's answer, held and
// then taken by b's request, gives its buffer back to the pool.
func TestHeldEmptyReadReturnsBuffer(t *testing.T) {
	a, b := heldPair(t, false)
	q := b.qp.(*qp)
	wc := make([]verbs.WC, 1)
	free := func() int {
		q.acc.mu.Lock()
		defer q.acc.mu.Unlock()
		return len(q.acc.small)
	}
	for i := range 4 * attempts {
		if _, err := b.qp.PostRecv(&verbs.RecvWR{ID: uint64(100 + i)}); err != nil {
			t.Fatal(err)
		}
		read := verbs.SendWR{ID: 1, Op: verbs.OpRead, Flags: verbs.Signaled, SGL: a.sge(0, 0), RemoteAddr: b.mr.Addr() + 512, RKey: b.mr.RKey()}
		note := verbs.SendWR{ID: 2, Op: verbs.OpWriteImm, Imm: uint32(i)}
		read.Next = &note
		if _, err := a.qp.PostSend(&read); err != nil {
			t.Fatal(err)
		}
		if n, err := b.recvCQ.Wait(wc, time.Now().Add(10*time.Second)); n != 1 || err != nil {
			t.Fatalf("notification: %d %v", n, err)
		}
		if !q.respHeld.Load() {
			if c := waitOne(t, a.sendCQ); c.ID != 1 || c.Status != verbs.StatusSuccess {
				t.Fatalf("read %+v", c)
			}
			time.Sleep(time.Millisecond)
			continue
		}
		before := free()
		postByte(t, b, a, 128, 42, 9)
		if c := waitOne(t, a.sendCQ); c.ID != 1 || c.Status != verbs.StatusSuccess {
			t.Fatalf("held read %+v", c)
		}
		wroteByte(t, b, a, 128, 42, 9)
		if after := free(); after != before+1 {
			t.Fatalf("%d small buffers free after the held answer went, want %d", after, before+1)
		}
		return
	}
	t.Fatalf("no empty read's answer held in %d attempts", 4*attempts)
}
