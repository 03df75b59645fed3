package soft

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rmago/rmago/verbs"
)

// TestNotifyCompletions: a CQ calls the function NotifyCompletions gave it
// once per completion it adds (signalled writes, on the sender's CQ), and
// no more once it is cleared.
func TestNotifyCompletions(t *testing.T) {
	a, b := connected(t, 64)
	var calls atomic.Int32
	a.sendCQ.(verbs.CompletionNotifier).NotifyCompletions(func() { calls.Add(1) })
	post := func(id uint64) {
		wr := verbs.SendWR{ID: id, Op: verbs.OpWrite, Flags: verbs.Signaled, SGL: a.sge(0, 8), RemoteAddr: b.mr.Addr(), RKey: b.mr.RKey()}
		if _, err := a.qp.PostSend(&wr); err != nil {
			t.Fatal(err)
		}
		if wc := waitOne(t, a.sendCQ); wc.Status != verbs.StatusSuccess || wc.ID != id {
			t.Fatalf("write %d: %+v", id, wc)
		}
	}
	for id := range uint64(3) {
		post(id)
	}
	// The function runs after the completion is in the queue, in the
	// goroutine that added it: it may come just after the Wait returned.
	for end := time.Now().Add(10 * time.Second); calls.Load() < 3 && time.Now().Before(end); {
		runtime.Gosched()
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("3 completions called the function %d times", n)
	}
	a.sendCQ.(verbs.CompletionNotifier).NotifyCompletions(nil)
	post(3)
	if n := calls.Load(); n != 3 {
		t.Fatalf("after clearing it, the function was called %d times, want 3", n)
	}
}
