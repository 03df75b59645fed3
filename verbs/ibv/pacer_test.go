//go:build ibv && linux && cgo

package ibv

import (
	"sync"
	"testing"
	"time"
)

// TestPacerYields: with the clock moving 100 µs a post, the poster yields
// once per paceGap, looking at the clock once in paceEvery posts; with a
// clock that stands still it never yields; from many goroutines at once
// each gap still yields once.
func TestPacerYields(t *testing.T) {
	var clock int64
	yields := 0
	p := pacer{now: func() int64 { return clock }, yield: func() { yields++ }}
	const posts = 100 * paceEvery
	for range posts {
		clock += int64(100 * time.Microsecond)
		p.posted()
	}
	// A look every paceEvery posts (6.4 ms apart) finds the gap passed.
	if yields != posts/paceEvery {
		t.Errorf("%d yields in %d posts of 100 µs, want %d", yields, posts, posts/paceEvery)
	}

	q := pacer{now: func() int64 { return 0 }, yield: func() { yields++ }}
	yields = 0
	for range posts {
		q.posted()
	}
	if yields != 0 {
		t.Errorf("%d yields with the clock standing still", yields)
	}

	var mu sync.Mutex
	var now int64
	n := 0
	r := pacer{now: func() int64 { mu.Lock(); defer mu.Unlock(); return now }, yield: func() { mu.Lock(); n++; mu.Unlock() }}
	now = int64(paceGap) // one gap since the epoch: the first look yields
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 * paceEvery {
				r.posted()
			}
		}()
	}
	wg.Wait()
	if n != 1 {
		t.Errorf("8 goroutines, the clock still: %d yields, want 1", n)
	}
}
