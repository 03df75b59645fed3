//go:build ibv && linux && cgo

package ibv

import (
	"runtime"
	"sync/atomic"
	"time"
)

// A goroutine that posts in a loop and finds every completion at its first
// look (rxe runs a request's whole exchange inside ibv_post_send) never
// passes through Go's scheduler. After 10 ms sysmon preempts it, and since
// it is then almost always inside the post's cgo call, sysmon takes its P
// away; that puts sysmon back to looking every 20 µs, each look a clock
// read and a sleep. Under QEMU TCG, where the kernel trusts no TSC, the
// clock read is a system call: a fetch-and-add loop paid 1.4 of them and a
// context switch per operation, which perftest does not. So the poster
// yields to the scheduler itself, at most once per paceGap, looking at the
// clock once in paceEvery posts.

const (
	paceEvery = 64                   // posts per look at the clock
	paceGap   = 1 * time.Millisecond // the longest run between two yields, give or take paceEvery posts
)

// pacer makes a context's posting goroutines yield now and then. Its zero
// value is ready; it is safe for concurrent use.
type pacer struct {
	posts atomic.Uint32
	last  atomic.Int64 // when it last yielded, ns since paceEpoch
	// now and yield are the clock and the yield; nil: time since
	// paceEpoch and runtime.Gosched (tests set them).
	now   func() int64
	yield func()
}

var paceEpoch = time.Now()

// posted counts one post, and yields if paceGap has passed since the last
// yield.
func (p *pacer) posted() {
	if p.posts.Add(1)%paceEvery != 0 {
		return
	}
	var now int64
	if p.now != nil {
		now = p.now()
	} else {
		now = int64(time.Since(paceEpoch))
	}
	last := p.last.Load()
	if now-last < int64(paceGap) || !p.last.CompareAndSwap(last, now) {
		return
	}
	if p.yield != nil {
		p.yield()
		return
	}
	runtime.Gosched()
}
