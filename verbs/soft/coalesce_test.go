package soft

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/rmago/rmago/verbs"
)

// corkedPair is connected with corks that no timer sends: only the flush
// points under test (or a request sent at once) do.
func corkedPair(t *testing.T, size int) (*side, *side) {
	t.Helper()
	a, b := newSide(t, size), newSide(t, size)
	for _, s := range []*side{a, b} {
		s.ctx.(*device).corkDelay = time.Hour
		// A send queue deep enough for a long batch.
		s.qp.Close()
		q, err := s.pd.CreateQP(verbs.QPAttr{SendCQ: s.sendCQ, RecvCQ: s.recvCQ, MaxSendWR: 512, MaxRecvWR: 16})
		if err != nil {
			t.Fatal(err)
		}
		s.qp = q
	}
	errc := make(chan error, 1)
	go func() { errc <- b.qp.Connect(a.qp.Endpoint()) }()
	if err := a.qp.Connect(b.qp.Endpoint()); err != nil {
		t.Fatal(err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	return a, b
}

// idPoster returns post, which posts a work request on a's queue pair
// with b's rkey and the next ID (1, 2, ...), failing the test if the post
// fails, and last, the last ID it gave.
func idPoster(t *testing.T, a, b *side) (post func(verbs.SendWR), last func() uint64) {
	id := uint64(0)
	post = func(wr verbs.SendWR) {
		t.Helper()
		id++
		wr.ID, wr.RKey = id, b.mr.RKey()
		if _, err := a.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
	}
	return post, func() uint64 { return id }
}

// corked is what a's queue pair holds in its cork, in bytes.
func corked(s *side) int {
	q := s.qp.(*qp)
	q.sendMu.Lock()
	defer q.sendMu.Unlock()
	return q.corkLen
}

// TestCoalescedBatchOrder: unsignalled small writes (overwriting each
// other), reads of what they wrote and fetch-adds wait in the cork, then
// leave with a signalled request, all in order: later writes win, reads
// see the writes before them, the fetch-adds return consecutive values,
// and the one completion (the signalled request's) implies all of them.
// Requests sent at once in between (a large write, a write with
// immediate data, a signalled fetch-add in a chain) keep their places.
func TestCoalescedBatchOrder(t *testing.T) {
	const big = corkMax + 1
	a, b := corkedPair(t, 64<<10)
	if many := 300; many*(hdrLen+1)+hdrLen > corkSize {
		t.Fatal("the long batch does not fit the cork")
	}
	rwr := verbs.RecvWR{ID: 5, SGL: b.sge(60<<10, 8)}
	if _, err := b.qp.PostRecv(&rwr); err != nil {
		t.Fatal(err)
	}
	post, last := idPoster(t, a, b)
	// Round r writes byte r+1 to b[16r:16r+16] and to b[1000] (which
	// every round overwrites), then reads b[16r:16r+16] into
	// a[1024+16r:], then adds 1 to the counter at b[4096], old value to
	// a[2048+8r]. (A read's data leaves with its response, after the
	// requests that arrived with it ran: a read and a later write of the
	// same bytes in one batch conflict, as in an MPI epoch.)
	const rounds = 20
	for r := range rounds {
		for i := range 16 {
			a.buf[16*r+i] = byte(r + 1)
		}
		post(verbs.SendWR{Op: verbs.OpWrite, SGL: a.sge(16*r, 16), RemoteAddr: b.mr.Addr() + uint64(16*r)})
		post(verbs.SendWR{Op: verbs.OpWrite, SGL: a.sge(16*r, 1), RemoteAddr: b.mr.Addr() + 1000})
		post(verbs.SendWR{Op: verbs.OpRead, SGL: a.sge(1024+16*r, 16), RemoteAddr: b.mr.Addr() + uint64(16*r)})
		if r == 5 {
			if got, want := corked(a), 3*hdrLen+17; got != want {
				t.Fatalf("cork holds %d bytes in round 5, want %d", got, want)
			}
		}
		// An atomic is sent at once, after the cork.
		post(verbs.SendWR{Op: verbs.OpFetchAdd, SGL: a.sge(2048+8*r, 8), RemoteAddr: b.mr.Addr() + 4096, CompareAdd: 1})
		if got := corked(a); got != 0 {
			t.Fatalf("cork holds %d bytes after a fetch-add", got)
		}
		if r == 7 { // a large write, sent at once after the cork, then read back
			for i := range big {
				a.buf[8192+i] = byte(i*13 + 1)
			}
			post(verbs.SendWR{Op: verbs.OpWrite, SGL: a.sge(8192, big), RemoteAddr: b.mr.Addr() + 8192})
			if got := corked(a); got != 0 {
				t.Fatalf("cork holds %d bytes after a large write", got)
			}
			post(verbs.SendWR{Op: verbs.OpRead, SGL: a.sge(32768, big), RemoteAddr: b.mr.Addr() + 8192})
		}
		if r == 11 { // a write with immediate data, sent at once
			post(verbs.SendWR{Op: verbs.OpWriteImm, SGL: a.sge(16*r, 8), RemoteAddr: b.mr.Addr() + 1100, Imm: 77})
		}
		if r == 13 { // a chain: unsignalled read, signalled fetch-add
			rd := verbs.SendWR{ID: 1000, Op: verbs.OpRead, SGL: a.sge(3072, 16), RemoteAddr: b.mr.Addr() + 16*13, RKey: b.mr.RKey()}
			fa := verbs.SendWR{ID: 1001, Op: verbs.OpFetchAdd, Flags: verbs.Signaled, SGL: a.sge(3200, 8), RemoteAddr: b.mr.Addr() + 4104, RKey: b.mr.RKey(), CompareAdd: 9}
			rd.Next = &fa
			if _, err := a.qp.PostSend(&rd); err != nil {
				t.Fatal(err)
			}
			if wc := waitOne(t, a.sendCQ); wc.ID != 1001 || wc.Status != verbs.StatusSuccess {
				t.Fatalf("chain's completion %+v", wc)
			}
		}
	}
	// A long batch: 300 one-byte writes, each of b[1200+i] (one frame,
	// merged: mergeWrite), then a read of them all, then the signalled
	// request.
	const many = 300
	for i := range many {
		a.buf[20000+i] = byte(i*3 + 1)
		post(verbs.SendWR{Op: verbs.OpWrite, SGL: a.sge(20000+i, 1), RemoteAddr: b.mr.Addr() + 1200 + uint64(i)})
	}
	post(verbs.SendWR{Op: verbs.OpRead, SGL: a.sge(24000, many), RemoteAddr: b.mr.Addr() + 1200})
	if got, want := corked(a), hdrLen+many+hdrLen; got != want {
		t.Fatalf("cork holds %d bytes after %d writes and a read, want %d", got, many, want)
	}
	post(verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(0, 1), RemoteAddr: b.mr.Addr() + 1001})
	if wc := waitOne(t, a.sendCQ); wc.ID != last() || wc.Status != verbs.StatusSuccess {
		t.Fatalf("completion %+v, want request %d", wc, last())
	}
	if n, _ := a.sendCQ.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Fatalf("unsignalled requests produced %d completions", n)
	}
	for r := range rounds {
		if got, want := a.buf[1024+16*r:1024+16*r+16], bytes.Repeat([]byte{byte(r + 1)}, 16); !bytes.Equal(got, want) {
			t.Fatalf("read of round %d: %v, want %v", r, got, want)
		}
		if old := binary.LittleEndian.Uint64(a.buf[2048+8*r:]); old != uint64(r) {
			t.Fatalf("fetch-add of round %d: old %d", r, old)
		}
	}
	if !bytes.Equal(a.buf[24000:24000+many], a.buf[20000:20000+many]) || !bytes.Equal(b.buf[1200:1200+many], a.buf[20000:20000+many]) {
		t.Fatal("long batch: data differs")
	}
	if !bytes.Equal(a.buf[3072:3088], bytes.Repeat([]byte{14}, 16)) {
		t.Fatalf("chain's read: %v", a.buf[3072:3088])
	}
	if !bytes.Equal(b.buf[:16*rounds], a.buf[:16*rounds]) || b.buf[1000] != rounds || binary.LittleEndian.Uint64(b.buf[4096:]) != rounds ||
		binary.LittleEndian.Uint64(b.buf[4104:]) != 9 || b.buf[1001] != 1 {
		t.Fatalf("target after the batch: %v, last %d, counter %d", b.buf[:16*rounds], b.buf[1000], binary.LittleEndian.Uint64(b.buf[4096:]))
	}
	if !bytes.Equal(a.buf[32768:32768+big], a.buf[8192:8192+big]) || !bytes.Equal(b.buf[8192:8192+big], a.buf[8192:8192+big]) {
		t.Fatal("large write in the batch: data differs")
	}
	if wc := waitOne(t, b.recvCQ); wc.ID != 5 || !wc.HasImm || wc.Imm != 77 || !bytes.Equal(b.buf[1100:1108], a.buf[176:184]) {
		t.Fatalf("write with immediate: %+v, data %v", wc, b.buf[1100:1108])
	}
}

// TestLoneRequestFlushPoints: an unsignalled write and read followed by
// nothing reach the peer when the origin polls or waits on its completion
// queue, drives the context, closes the queue pair, or, with none of
// these, when the cork's timer expires.
func TestLoneRequestFlushPoints(t *testing.T) {
	cases := []struct {
		name  string
		timer bool
		flush func(a *side)
	}{
		{"poll", false, func(a *side) { a.sendCQ.Poll(make([]verbs.WC, 1)) }},
		{"wait", false, func(a *side) { a.sendCQ.Wait(make([]verbs.WC, 1), time.Now().Add(time.Millisecond)) }},
		{"progress", false, func(a *side) {
			a.ctx.(verbs.Progresser).Progress()
			a.ctx.(verbs.Progresser).EndProgress()
		}},
		{"close", false, func(a *side) { a.qp.Close() }},
		{"timer", true, func(a *side) {}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var a, b *side
			if c.timer {
				a, b = connected(t, 64)
			} else {
				a, b = corkedPair(t, 64)
			}
			copy(a.buf, "lonely!!")
			w := verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey()}
			rd := verbs.SendWR{ID: 2, Op: verbs.OpRead, SGL: a.sge(16, 8), RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey()}
			w.Next = &rd
			if _, err := a.qp.PostSend(&w); err != nil {
				t.Fatal(err)
			}
			if !c.timer {
				if got := corked(a); got != 2*hdrLen+8 {
					t.Fatalf("cork holds %d bytes", got)
				}
			}
			c.flush(a)
			// The peer's record of the last request it executed (an
			// atomic) orders its execution before the check.
			for end := time.Now().Add(10 * time.Second); b.qp.(*qp).lastExec.Load() < 2; {
				if time.Now().After(end) {
					t.Fatal("the requests never reached the peer")
				}
				time.Sleep(time.Millisecond)
			}
			if string(b.buf[8:16]) != "lonely!!" {
				t.Fatalf("write: %q", b.buf[8:16])
			}
		})
	}
}

// TestRefusedInBatch: a coalesced batch whose middle request is refused
// completes that request with the remote access error and the later ones
// as flushed, and executes nothing after it; the one before it executed.
func TestRefusedInBatch(t *testing.T) {
	a, b := corkedPair(t, 64)
	copy(a.buf, "abcdefgh")
	wrs := []verbs.SendWR{
		{ID: 1, Op: verbs.OpWrite, SGL: a.sge(0, 2), RemoteAddr: b.mr.Addr()},
		{ID: 2, Op: verbs.OpWrite, SGL: a.sge(2, 2), RemoteAddr: b.mr.Addr() + 63}, // beyond the region
		{ID: 3, Op: verbs.OpWrite, SGL: a.sge(4, 2), RemoteAddr: b.mr.Addr() + 4},
		{ID: 4, Op: verbs.OpRead, SGL: a.sge(8, 8), RemoteAddr: b.mr.Addr() + 8},
		{ID: 5, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(6, 2), RemoteAddr: b.mr.Addr() + 6},
	}
	for i := range wrs {
		wrs[i].RKey = b.mr.RKey()
		if _, err := a.qp.PostSend(&wrs[i]); err != nil {
			t.Fatal(err)
		}
		if i == 3 {
			if got, want := corked(a), 4*hdrLen+6; got != want {
				t.Fatalf("cork holds %d bytes, want %d", got, want)
			}
		}
	}
	want := []struct {
		id uint64
		st verbs.Status
	}{{2, verbs.StatusRemoteAccess}, {3, verbs.StatusFlushed}, {4, verbs.StatusFlushed}, {5, verbs.StatusFlushed}}
	for _, w := range want {
		wc := waitOne(t, a.sendCQ)
		if wc.ID != w.id || wc.Status != w.st {
			t.Fatalf("completion %+v, want request %d with %v", wc, w.id, w.st)
		}
	}
	if !errors.Is(a.qp.(verbs.ErrorReporter).Err(), verbs.ErrRemoteAccess) {
		t.Fatalf("cause %v", a.qp.(verbs.ErrorReporter).Err())
	}
	if got := b.buf[:16]; !bytes.Equal(got, append([]byte("ab"), make([]byte, 14)...)) {
		t.Fatalf("target %q: only the first write may have executed", got)
	}
}

// TestCoalescedNotification: a notification posted with verbs.Coalesce
// waits in the cork (behind a small write), leaves with the next request
// sent at once, ahead of it, and the receiver gets both in order, the
// write's data visible at the first; alone, it reaches the peer at a
// flush point (here a poll of the sender's completion queue). A
// signalled one, or one with a payload, is sent at once.
func TestCoalescedNotification(t *testing.T) {
	a, b := corkedPair(t, 64)
	for i := range 5 {
		rwr := verbs.RecvWR{ID: uint64(10 + i)}
		if _, err := b.qp.PostRecv(&rwr); err != nil {
			t.Fatal(err)
		}
	}
	copy(a.buf, "notified")
	w := verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	n1 := verbs.SendWR{ID: 2, Op: verbs.OpWriteImm, Flags: verbs.Coalesce, Imm: 1}
	w.Next = &n1
	if _, err := a.qp.PostSend(&w); err != nil {
		t.Fatal(err)
	}
	if got := corked(a); got != 2*hdrLen+8 {
		t.Fatalf("cork holds %d bytes after a write and a coalesced notification, want %d", got, 2*hdrLen+8)
	}
	n2 := verbs.SendWR{ID: 3, Op: verbs.OpWriteImm, Imm: 2} // sent at once, with the cork
	if _, err := a.qp.PostSend(&n2); err != nil {
		t.Fatal(err)
	}
	if got := corked(a); got != 0 {
		t.Fatalf("cork holds %d bytes after a notification sent at once", got)
	}
	for _, want := range []uint32{1, 2} {
		wc := waitOne(t, b.recvCQ)
		if !wc.HasImm || wc.Imm != want {
			t.Fatalf("notification %+v, want immediate %d", wc, want)
		}
		if want == 1 && string(b.buf[:8]) != "notified" {
			t.Fatalf("write before the first notification: %q", b.buf[:8])
		}
	}
	n3 := verbs.SendWR{ID: 4, Op: verbs.OpWriteImm, Flags: verbs.Coalesce, Imm: 3}
	if _, err := a.qp.PostSend(&n3); err != nil {
		t.Fatal(err)
	}
	if got := corked(a); got != hdrLen {
		t.Fatalf("cork holds %d bytes after a lone coalesced notification", got)
	}
	a.sendCQ.Poll(make([]verbs.WC, 1))
	if wc := waitOne(t, b.recvCQ); !wc.HasImm || wc.Imm != 3 {
		t.Fatalf("lone notification %+v", wc)
	}
	for _, wr := range []verbs.SendWR{
		{ID: 5, Op: verbs.OpWriteImm, Flags: verbs.Coalesce | verbs.Signaled, Imm: 4},
		{ID: 6, Op: verbs.OpWriteImm, Flags: verbs.Coalesce, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey(), Imm: 5},
	} {
		if _, err := a.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		if got := corked(a); got != 0 {
			t.Fatalf("request %d: cork holds %d bytes", wr.ID, got)
		}
		if wc := waitOne(t, b.recvCQ); !wc.HasImm || wc.Imm != uint32(wr.ID-1) {
			t.Fatalf("request %d arrived as %+v", wr.ID, wc)
		}
	}
}

// TestCoalescedAccumulates: unsignalled accumulates without results wait
// in the cork like small writes, their operands copied at post (changing
// the origin's buffer afterwards changes nothing), and leave in order
// with the next request sent at once: a fetch-add of the same word sees
// every sum before it, a read in the batch sees them too, and the
// signalled request's completion implies them all. Fetching ones are
// sent at once.
func TestCoalescedAccumulates(t *testing.T) {
	a, b := corkedPair(t, 4096)
	sum := verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int64}
	post, last := idPoster(t, a, b)
	// 40 sums of 3 elements (k, 2k, 3k) into b's words 0-2, each operand
	// overwritten in a's buffer right after its post.
	const n = 40
	for k := 1; k <= n; k++ {
		for i := range 3 {
			binary.LittleEndian.PutUint64(a.buf[8*i:], uint64(k*(i+1)))
		}
		post(verbs.SendWR{Op: verbs.OpAccumulate, SGL: a.sge(0, 24), RemoteAddr: b.mr.Addr(), Acc: sum})
		for i := range 24 {
			a.buf[i] = 0xEE
		}
		if k == 10 {
			if got, want := corked(a), 10*(hdrLen+24); got != want {
				t.Fatalf("cork holds %d bytes after 10 accumulates, want %d", got, want)
			}
		}
	}
	// (A read's data is taken when its response leaves, after the batch:
	// it reads words 1 and 2, which the fetch-add does not change.)
	post(verbs.SendWR{Op: verbs.OpRead, SGL: a.sge(108, 16), RemoteAddr: b.mr.Addr() + 8})
	if got, want := corked(a), n*(hdrLen+24)+hdrLen; got != want {
		t.Fatalf("cork holds %d bytes after %d accumulates and a read, want %d", got, n, want)
	}
	// A fetch-add of word 0, sent at once behind the cork.
	post(verbs.SendWR{Op: verbs.OpFetchAdd, Flags: verbs.Signaled, SGL: a.sge(200, 8), RemoteAddr: b.mr.Addr(), CompareAdd: 1000})
	if got := corked(a); got != 0 {
		t.Fatalf("cork holds %d bytes after a fetch-add", got)
	}
	if wc := waitOne(t, a.sendCQ); wc.ID != last() || wc.Status != verbs.StatusSuccess {
		t.Fatalf("completion %+v, want request %d", wc, last())
	}
	total := uint64(n * (n + 1) / 2)
	if old := binary.LittleEndian.Uint64(a.buf[200:]); old != total {
		t.Fatalf("fetch-add saw %d, want %d", old, total)
	}
	for i := 1; i < 3; i++ {
		if got := binary.LittleEndian.Uint64(a.buf[100+8*i:]); got != total*uint64(i+1) {
			t.Fatalf("read of element %d: %d, want %d", i, got, total*uint64(i+1))
		}
	}
	want := []uint64{total + 1000, 2 * total, 3 * total}
	for i, w := range want {
		if got := binary.LittleEndian.Uint64(b.buf[8*i:]); got != w {
			t.Fatalf("target element %d = %d, want %d", i, got, w)
		}
	}
	// A fetching accumulate is sent at once, with what the cork holds.
	binary.LittleEndian.PutUint64(a.buf[300:], 5)
	post(verbs.SendWR{Op: verbs.OpAccumulate, SGL: a.sge(300, 8), RemoteAddr: b.mr.Addr() + 64, Acc: sum})
	binary.LittleEndian.PutUint64(a.buf[308:], 7)
	post(verbs.SendWR{Op: verbs.OpAccumulate, Flags: verbs.Signaled, SGL: a.sge(308, 8), RemoteAddr: b.mr.Addr() + 64,
		Acc: verbs.Accumulate{Op: verbs.AccSum, Type: verbs.Int64, Fetch: true}})
	if got := corked(a); got != 0 {
		t.Fatalf("cork holds %d bytes after a fetching accumulate", got)
	}
	if wc := waitOne(t, a.sendCQ); wc.ID != last() || wc.Status != verbs.StatusSuccess {
		t.Fatalf("completion %+v, want request %d", wc, last())
	}
	if old, now := binary.LittleEndian.Uint64(a.buf[308:]), binary.LittleEndian.Uint64(b.buf[64:]); old != 5 || now != 12 {
		t.Fatalf("fetching accumulate: old %d, target %d; want 5 and 12", old, now)
	}
}

// TestMergedWrites: unsignalled writes whose target bytes follow the
// cork's last write (same rkey) grow that frame instead of adding one, up
// to corkMax; a gap, another rkey, a frame of another kind in between, a
// signalled write or a full merge start a new frame. The data lands
// exactly, and one signalled completion still implies every request.
func TestMergedWrites(t *testing.T) {
	a, b := corkedPair(t, 32<<10)
	other, err := b.pd.RegMR(make([]byte, 64), verbs.AccessRemoteWrite|verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Dereg()
	for i := range 20000 {
		a.buf[i] = byte(i*7 + 3)
	}
	post, last := idPoster(t, a, b)
	write := func(src, dst, n int) {
		post(verbs.SendWR{Op: verbs.OpWrite, SGL: a.sge(src, n), RemoteAddr: b.mr.Addr() + uint64(dst)})
	}
	want := 0 // bytes the cork should hold
	check := func(what string) {
		t.Helper()
		if got := corked(a); got != want {
			t.Fatalf("%s: cork holds %d bytes, want %d", what, got, want)
		}
	}
	// Eight 8-byte puts to consecutive bytes, from scattered sources: one frame.
	for k := range 8 {
		write(1000*k, 8*k, 8)
	}
	want = hdrLen + 64
	check("8 consecutive puts")
	// A gap of 8 bytes: a new frame.
	write(9000, 72, 8)
	want += hdrLen + 8
	check("a put after a gap")
	// Another rkey at the next address: a new frame.
	wr := verbs.SendWR{Op: verbs.OpWrite, SGL: a.sge(9100, 8), RemoteAddr: other.Addr(), RKey: other.RKey(), ID: 999}
	if _, err := a.qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	want += hdrLen + 8
	check("a put to another region")
	// A read in between: the next write does not merge into the earlier one.
	write(9200, 80, 8)
	want += hdrLen + 8
	post(verbs.SendWR{Op: verbs.OpRead, SGL: a.sge(16000, 8), RemoteAddr: b.mr.Addr()})
	want += hdrLen
	write(9300, 88, 8)
	want += hdrLen + 8
	check("a put after a read")
	// Merges stop at corkMax: 1 KiB writes, consecutive, from offset 4096.
	for k := range 10 {
		write(10000+100*k, 4096+1024*k, 1024)
	}
	want += 2*hdrLen + 10*1024
	check("ten 1 KiB puts")
	// A signalled write at the next address is sent at once, with the cork.
	post(verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(11000, 8), RemoteAddr: b.mr.Addr() + 4096 + 10240})
	if wc := waitOne(t, a.sendCQ); wc.ID != last() || wc.Status != verbs.StatusSuccess {
		t.Fatalf("completion %+v, want request %d", wc, last())
	}
	if n, _ := a.sendCQ.Poll(make([]verbs.WC, 4)); n != 0 {
		t.Fatalf("unsignalled requests produced %d completions", n)
	}
	for k := range 8 {
		if got, w := b.buf[8*k:8*k+8], a.buf[1000*k:1000*k+8]; !bytes.Equal(got, w) {
			t.Fatalf("put %d: %v, want %v", k, got, w)
		}
	}
	if !bytes.Equal(b.buf[64:72], make([]byte, 8)) || !bytes.Equal(b.buf[72:80], a.buf[9000:9008]) ||
		!bytes.Equal(b.buf[80:88], a.buf[9200:9208]) || !bytes.Equal(b.buf[88:96], a.buf[9300:9308]) {
		t.Fatalf("puts around the gap and the read: %v", b.buf[64:96])
	}
	if !bytes.Equal(a.buf[16000:16008], b.buf[:8]) {
		t.Fatalf("read: %v, want %v", a.buf[16000:16008], b.buf[:8])
	}
	for k := range 10 {
		if got, w := b.buf[4096+1024*k:4096+1024*(k+1)], a.buf[10000+100*k:10000+100*k+1024]; !bytes.Equal(got, w) {
			t.Fatalf("1 KiB put %d differs", k)
		}
	}
	if got := b.buf[4096+10240 : 4096+10248]; !bytes.Equal(got, a.buf[11000:11008]) {
		t.Fatalf("signalled put: %v", got)
	}
}

// TestMergedWriteRefused: a merged write that runs past the target's
// region fails whole: the error completes the request that began it (the
// unsignalled writes merged into it take no pending entry: mergeFast),
// the requests after it are flushed, and none of its bytes land
// (mergeWrite's documented difference from hardware).
func TestMergedWriteRefused(t *testing.T) {
	a, b := corkedPair(t, 64)
	copy(a.buf, "abcdefgh")
	wrs := []verbs.SendWR{
		{ID: 1, Op: verbs.OpWrite, SGL: a.sge(0, 4), RemoteAddr: b.mr.Addr() + 56},
		{ID: 2, Op: verbs.OpWrite, SGL: a.sge(4, 8), RemoteAddr: b.mr.Addr() + 60}, // ends beyond the region
		{ID: 3, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(0, 2), RemoteAddr: b.mr.Addr()},
	}
	for i := range wrs {
		wrs[i].RKey = b.mr.RKey()
		if _, err := a.qp.PostSend(&wrs[i]); err != nil {
			t.Fatal(err)
		}
		if i == 1 {
			if got, want := corked(a), hdrLen+12; got != want {
				t.Fatalf("cork holds %d bytes, want %d (one merged frame)", got, want)
			}
		}
	}
	for _, w := range []struct {
		id uint64
		st verbs.Status
	}{{1, verbs.StatusRemoteAccess}, {3, verbs.StatusFlushed}} {
		if wc := waitOne(t, a.sendCQ); wc.ID != w.id || wc.Status != w.st {
			t.Fatalf("completion %+v, want request %d with %v", wc, w.id, w.st)
		}
	}
	if got := b.buf[:64]; !bytes.Equal(got, make([]byte, 64)) {
		t.Fatalf("target %q: the merged write landed in part", got)
	}
}

// TestSignalledWriteCoalesced: a write signalled with verbs.Coalesce (the
// transport's one-in-so-many signal, which nobody waits for yet) stays in
// the cork and merges into the write before it; the frames after it start
// anew. Its completion comes once something sends the cork (here, a poll
// of the completion queue), and implies the writes before it; the one
// after it completes with the next signalled request.
func TestSignalledWriteCoalesced(t *testing.T) {
	a, b := corkedPair(t, 4096)
	for i := range 64 {
		a.buf[i] = byte(i + 1)
	}
	post, last := idPoster(t, a, b)
	write := func(off int, flags verbs.SendFlags) {
		post(verbs.SendWR{Op: verbs.OpWrite, Flags: flags, SGL: a.sge(off, 8), RemoteAddr: b.mr.Addr() + uint64(off)})
	}
	write(0, 0)
	write(8, verbs.Signaled|verbs.Coalesce)
	signalled := last()
	if got, want := corked(a), hdrLen+16; got != want {
		t.Fatalf("cork holds %d bytes after a write and a signalled coalesced one, want %d (one frame)", got, want)
	}
	write(16, 0)
	if got, want := corked(a), 2*hdrLen+24; got != want {
		t.Fatalf("cork holds %d bytes after a write behind the signalled one, want %d (a new frame)", got, want)
	}
	wcs := make([]verbs.WC, 4)
	n, _ := a.sendCQ.Poll(wcs) // sends the cork (and may find the answer already)
	wc := wcs[0]
	if n == 0 {
		wc = waitOne(t, a.sendCQ)
	}
	if wc.ID != signalled || wc.Status != verbs.StatusSuccess || n > 1 {
		t.Fatalf("completion %+v, want request %d", wc, signalled)
	}
	write(24, verbs.Signaled) // sent at once, with nothing in the cork
	if wc := waitOne(t, a.sendCQ); wc.ID != last() || wc.Status != verbs.StatusSuccess {
		t.Fatalf("completion %+v, want request %d", wc, last())
	}
	if !bytes.Equal(b.buf[:32], a.buf[:32]) {
		t.Fatalf("target holds %v, want %v", b.buf[:32], a.buf[:32])
	}
}

// An atomic posted with Coalesce (a lock's release nobody waits for yet)
// waits in the cork: alone it still arrives (the cork's timer, at most
// corkAtomicDelay), and before a later request it executes first, in
// order; both old values come back exact.
func TestCoalescedAtomic(t *testing.T) {
	a, b := connected(t, 4096)
	binary.LittleEndian.PutUint64(b.buf[0:], 40)
	faa := verbs.SendWR{ID: 1, Op: verbs.OpFetchAdd, Flags: verbs.Signaled | verbs.Coalesce, SGL: a.sge(64, 8),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 2}
	if _, err := a.qp.PostSend(&faa); err != nil {
		t.Fatal(err)
	}
	if wc := waitOne(t, a.sendCQ); wc.ID != 1 || wc.Status != verbs.StatusSuccess {
		t.Fatalf("%+v", wc)
	}
	if old := binary.LittleEndian.Uint64(a.buf[64:]); old != 40 {
		t.Fatalf("old value %d, want 40", old)
	}
	// Corked, then a compare-and-swap that only succeeds after it.
	faa.ID = 2
	if _, err := a.qp.PostSend(&faa); err != nil {
		t.Fatal(err)
	}
	cas := verbs.SendWR{ID: 3, Op: verbs.OpCompareSwap, Flags: verbs.Signaled, SGL: a.sge(72, 8),
		RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey(), CompareAdd: 44, Swap: 7}
	if _, err := a.qp.PostSend(&cas); err != nil {
		t.Fatal(err)
	}
	for _, id := range []uint64{2, 3} {
		if wc := waitOne(t, a.sendCQ); wc.ID != id || wc.Status != verbs.StatusSuccess {
			t.Fatalf("want completion %d: %+v", id, wc)
		}
	}
	if old := binary.LittleEndian.Uint64(a.buf[72:]); old != 44 {
		t.Fatalf("compare-and-swap saw %d, want 44 (the corked add first)", old)
	}
	if got := binary.LittleEndian.Uint64(b.buf[0:]); got != 7 {
		t.Fatalf("word %d, want 7", got)
	}
}

// pendingOf is how many requests of a's queue pair wait for completion.
func pendingOf(a *side) int {
	q := a.qp.(*qp)
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.pn
}

// TestMergeFastTakesNoEntry: adjacent unsignalled writes after the first
// merge into its frame without a pending entry each (mergeFast); a
// signalled one that follows completes alone and implies them all, with
// every byte in place.
func TestMergeFastTakesNoEntry(t *testing.T) {
	a, b := corkedPair(t, 4096)
	post, last := idPoster(t, a, b)
	const n = 200
	for i := range n {
		a.buf[i] = byte(i*7 + 3)
		post(verbs.SendWR{Op: verbs.OpWrite, SGL: a.sge(i, 1), RemoteAddr: b.mr.Addr() + 1000 + uint64(i)})
	}
	if got := pendingOf(a); got != 1 {
		t.Fatalf("%d pending requests after %d adjacent unsignalled writes, want 1 (the frame's first)", got, n)
	}
	if got, want := corked(a), hdrLen+n; got != want {
		t.Fatalf("cork holds %d bytes, want %d (one frame)", got, want)
	}
	a.buf[n] = 0xee
	post(verbs.SendWR{Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(n, 1), RemoteAddr: b.mr.Addr() + 1000 + n})
	if wc := waitOne(t, a.sendCQ); wc.ID != last() || wc.Status != verbs.StatusSuccess {
		t.Fatalf("completion %+v, want request %d", wc, last())
	}
	if k, _ := a.sendCQ.Poll(make([]verbs.WC, 4)); k != 0 {
		t.Fatalf("%d more completions", k)
	}
	if got := pendingOf(a); got != 0 {
		t.Fatalf("%d requests still pending after the completion", got)
	}
	if !bytes.Equal(b.buf[1000:1000+n+1], a.buf[:n+1]) {
		t.Fatal("target's bytes differ from the writes")
	}
}

// TestMergeFastRefusedAfterFailure: once the queue pair has failed, a
// write adjacent to the frame still in the cork is refused with the
// queue pair's error, as any post then, rather than merged into a frame
// that will never leave.
func TestMergeFastRefusedAfterFailure(t *testing.T) {
	a, b := corkedPair(t, 64)
	wr := verbs.SendWR{ID: 1, Op: verbs.OpWrite, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
	if _, err := a.qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	a.qp.(*qp).SetError(errors.New("test: the queue pair fails"))
	wr = verbs.SendWR{ID: 2, Op: verbs.OpWrite, SGL: a.sge(8, 8), RemoteAddr: b.mr.Addr() + 8, RKey: b.mr.RKey()}
	if _, err := a.qp.PostSend(&wr); !errors.Is(err, verbs.ErrQPState) {
		t.Fatalf("post after the failure: %v, want %v", err, verbs.ErrQPState)
	}
	if wc := waitOne(t, a.sendCQ); wc.ID != 1 || wc.Status == verbs.StatusSuccess {
		t.Fatalf("completion %+v, want request 1 failed", wc)
	}
}
