package accop

import (
	"math"
	"sync"
	"testing"
)

func TestFetchAddCompareSwap(t *testing.T) {
	w := new(uint64)
	*w = 40
	if old := FetchAdd(w, 2); old != 40 || *w != 42 {
		t.Fatalf("fetch-add 2 to 40: old %d, now %d", old, *w)
	}
	if old := FetchAdd(w, math.MaxUint64); old != 42 || *w != 41 { // adding -1 wraps
		t.Fatalf("fetch-add -1 to 42: old %d, now %d", old, *w)
	}
	if old := CompareSwap(w, 41, 7); old != 41 || *w != 7 {
		t.Fatalf("compare-swap 41->7 on 41: old %d, now %d", old, *w)
	}
	if old := CompareSwap(w, 41, 9); old != 7 || *w != 7 {
		t.Fatalf("compare-swap 41->9 on 7: old %d, now %d", old, *w)
	}
	if n := testing.AllocsPerRun(100, func() { FetchAdd(w, 1); CompareSwap(w, 0, 1) }); n != 0 {
		t.Fatalf("%v allocations per fetch-add and compare-swap", n)
	}
}

// Fetch-and-adds and compare-and-swap increments from several goroutines
// on one word lose no update, and each sees old values no other does.
func TestFetchAddCompareSwapConcurrent(t *testing.T) {
	const workers, each = 4, 2000
	var w uint64
	seen := make([][]uint64, workers)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			for i := range each {
				if (g+i)%2 == 0 {
					seen[g] = append(seen[g], FetchAdd(&w, 1))
					continue
				}
				for cur := uint64(0); ; { // a failed compare-and-swap returns the value to try next
					old := CompareSwap(&w, cur, cur+1)
					if old == cur {
						seen[g] = append(seen[g], old)
						break
					}
					cur = old
				}
			}
		})
	}
	wg.Wait()
	if w != workers*each {
		t.Fatalf("word is %d after %d increments", w, workers*each)
	}
	got := make([]bool, workers*each)
	for _, s := range seen {
		for _, v := range s {
			if v >= uint64(len(got)) || got[v] {
				t.Fatalf("old value %d seen twice or out of range", v)
			}
			got[v] = true
		}
	}
}
