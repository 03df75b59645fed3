package main

import (
	"errors"
	"fmt"
	"time"

	"github.com/rmago/rmago/apps/internal/coll"
	"github.com/rmago/rmago/apps/internal/decomp"
	"github.com/rmago/rmago/rma"
)

// config is one run: every rank adds updates keys into a histogram of
// bins bins spread over all ranks.
type config struct {
	bins    int
	updates int
	batch   bool // count locally first, then one Accumulate per owner
	seed    uint64
}

// splitmix64 is a small, good generator; every rank's key stream is a
// function of (seed, rank), so any rank can replay any other's.
type splitmix64 uint64

func (s *splitmix64) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// keys calls f with the bin of each of rank r's updates. A quarter of them
// fall on the 16 hottest bins, so those see every rank at once.
func keys(cfg config, r int, f func(bin int)) {
	g := splitmix64(cfg.seed ^ uint64(r+1)*0x2545f4914f6cdd1d)
	for range cfg.updates {
		x := g.next()
		if x&3 == 0 {
			f(int((x >> 2) % uint64(min(16, cfg.bins))))
		} else {
			f(int((x >> 2) % uint64(cfg.bins)))
		}
	}
}

// outcome is what a rank learns from a run.
type outcome struct {
	elapsed, seq time.Duration
	verified     bool
	why          string
}

// run builds the histogram on every rank of w and checks every bin count
// exactly against a sequential count. It is collective.
func run(w *rma.World, cfg config) (outcome, error) {
	var out outcome
	if cfg.bins < 1 || cfg.updates < 0 {
		return out, fmt.Errorf("need bins >= 1, updates >= 0")
	}
	p, me := w.Size(), w.Rank()
	red, err := coll.NewReducer[float64](w, 2)
	if err != nil {
		return out, err
	}
	defer red.Free()
	lo, hi := decomp.Block(cfg.bins, p, me)
	win, err := rma.Allocate[int64](w, hi-lo) // my bins, zeroed
	if err != nil {
		return out, err
	}
	// The bins of each update, generated before the clock starts.
	var mine []int
	keys(cfg, me, func(bin int) { mine = append(mine, bin) })
	one := []int64{1}
	var local []int64
	if cfg.batch {
		local = make([]int64, cfg.bins)
	}

	if err := w.Barrier(); err != nil {
		return out, err
	}
	start := time.Now()
	if err := win.LockAll(0); err != nil {
		return out, err
	}
	if cfg.batch {
		for _, b := range mine {
			local[b]++
		}
		for t := range p {
			tlo, thi := decomp.Block(cfg.bins, p, t)
			if err := win.Accumulate(local[tlo:thi], t, 0, rma.Sum); err != nil {
				return out, err
			}
		}
	} else {
		for _, b := range mine {
			t := decomp.Owner(cfg.bins, p, b)
			tlo, _ := decomp.Block(cfg.bins, p, t)
			// A fetch-and-add on the owner's NIC, posted without waiting:
			// Sum on int64 completes at the next synchronization.
			if err := win.Accumulate(one, t, b-tlo, rma.Sum); err != nil {
				return out, err
			}
		}
	}
	if err := win.UnlockAll(); err != nil { // every update is in place
		return out, err
	}
	// Every rank's updates are complete once every rank has unlocked.
	if err := w.Barrier(); err != nil {
		return out, err
	}
	slowest, err := red.Max(time.Since(start).Seconds())
	if err != nil {
		return out, err
	}
	out.elapsed = time.Duration(slowest * float64(time.Second))

	// Check: replay every rank's keys and count my bins; compare with
	// what the NICs added up. (Sync orders the peers' atomics, learned of
	// through the barrier, before the plain reads.)
	if err := win.Sync(); err != nil {
		return out, err
	}
	want := make([]int64, hi-lo)
	for r := range p {
		keys(cfg, r, func(b int) {
			if b >= lo && b < hi {
				want[b-lo]++
			}
		})
	}
	bad := 0
	var total int64
	for i, v := range win.Local() {
		total += v
		if v != want[i] {
			if bad == 0 {
				out.why = fmt.Sprintf("rank %d: bin %d counted %d, want %d", me, lo+i, v, want[i])
			}
			bad++
		}
	}
	var seq float64
	if me == 0 {
		seq = sequential(cfg, p).Seconds()
	}
	sums, err := red.Allreduce([]float64{float64(bad), seq}, coll.Sum[float64])
	if err != nil {
		return out, err
	}
	out.seq = time.Duration(sums[1] * float64(time.Second))
	if sums[0] > 0 && out.why == "" {
		out.why = fmt.Sprintf("%v bins wrong on other ranks", sums[0])
	}
	out.verified = sums[0] == 0
	return out, errors.Join(win.Free())
}

// sequential times the same histogram on one core: every rank's updates,
// counted into one array.
func sequential(cfg config, p int) time.Duration {
	all := make([][]int, p)
	for r := range p {
		keys(cfg, r, func(b int) { all[r] = append(all[r], b) })
	}
	h := make([]int64, cfg.bins)
	start := time.Now()
	for _, bins := range all {
		for _, b := range bins {
			h[b]++
		}
	}
	return time.Since(start)
}
