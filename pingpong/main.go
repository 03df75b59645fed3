// Command pingpong is rmago's one-to-one RMA ping-pong, the seed thesis's
// benchmark (section 5.1), run under rmarun with two ranks:
//
//	rmarun -n 2 ./pingpong [-max 20] [-reps 12] [-warmup 3] [-iters 1] [-thesis]
//
// Each round trip is fence; rank 0 puts n float64 into rank 1's window;
// fence; rank 1 puts them back into rank 0's window; fence. For each size
// n = 2^0 … 2^max it runs reps repetitions of iters round trips, drops the
// fastest and slowest repetition and reports the mean, with min, median and
// max, of the round-trip time. Every round trip's data is verified: a run
// that moved wrong bytes exits non-zero.
//
// -thesis reproduces the thesis exactly: no warm-up, one round trip per
// repetition.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"time"

	"github.com/rmago/rmago/rma"
)

func main() {
	maxExp := flag.Int("max", 20, "largest size is 2^max float64 elements")
	minExp := flag.Int("min", 0, "smallest size is 2^min elements")
	reps := flag.Int("reps", 12, "repetitions per size (min and max dropped)")
	warmup := flag.Int("warmup", 3, "untimed repetitions per size before measuring")
	iters := flag.Int("iters", 1, "round trips per repetition")
	thesis := flag.Bool("thesis", false, "the thesis's exact method: no warm-up, one round trip per repetition")
	lat := flag.Bool("lat", false, "instead: one-sided latencies of put+flush, get+flush and fetch-add (rank 0 to rank 1)")
	flag.Parse()
	if *thesis {
		*warmup, *iters = 0, 1
	}
	run := run
	if *lat {
		run = latencies
	}
	if err := run(*minExp, *maxExp, *reps, *warmup, *iters); err != nil {
		fmt.Fprintln(os.Stderr, "pingpong:", err)
		os.Exit(1)
	}
}

func run(minExp, maxExp, reps, warmup, iters int) error {
	if minExp < 0 || maxExp < minExp || maxExp > 30 || reps < 3 || iters < 1 || warmup < 0 {
		return errors.New("bad flags: need 0 <= min <= max <= 30, reps >= 3, iters >= 1")
	}
	w, err := rma.Init()
	if err != nil {
		return err
	}
	defer w.Close()
	if w.Size() != 2 {
		return fmt.Errorf("run with 2 ranks (rmarun -n 2), not %d", w.Size())
	}
	maxN := 1 << maxExp
	win, err := rma.Allocate[float64](w, maxN)
	if err != nil {
		return err
	}
	defer win.Free()
	src, err := rma.Allocate[float64](w, maxN) // registered origin memory
	if err != nil {
		return err
	}
	defer src.Free()
	me := w.Rank()
	if me == 0 {
		fmt.Printf("# rmago one-to-one ping-pong, fence protocol, provider %s, %d reps (min/max dropped), %d warm-up, %d round trips per rep\n",
			w.Provider().Name, reps, warmup, iters)
		fmt.Printf("%10s %12s %12s %12s %12s %12s\n", "elements", "bytes", "mean_us", "min_us", "median_us", "max_us")
	}
	if err := win.Fence(0); err != nil {
		return err
	}
	times := make([]float64, reps)
	round := 0
	for e := minExp; e <= maxExp; e++ {
		n := 1 << e
		for rep := -warmup; rep < reps; rep++ {
			start := time.Now()
			for it := 0; it < iters; it++ {
				round++
				if err := roundTrip(win, src, n, me, round); err != nil {
					return err
				}
			}
			if rep >= 0 {
				times[rep] = float64(time.Since(start).Nanoseconds()) / 1e3 / float64(iters)
			}
		}
		if me == 0 {
			s := summarize(times)
			fmt.Printf("%10d %12d %12.2f %12.2f %12.2f %12.2f\n", n, n*8, s.mean, s.min, s.median, s.max)
		}
	}
	return win.Fence(rma.NoSucceed)
}

// roundTrip is one thesis round trip, verified on rank 0.
func roundTrip(win, src *rma.Window[float64], n, me, round int) error {
	if me == 0 {
		data := src.Local()[:n]
		for i := range data {
			data[i] = float64(round) + float64(i)
		}
		if err := win.Put(data, 1, 0); err != nil {
			return err
		}
	}
	if err := win.Fence(0); err != nil {
		return err
	}
	if me == 1 {
		if err := win.Put(win.Local()[:n], 0, 0); err != nil {
			return err
		}
	}
	if err := win.Fence(0); err != nil {
		return err
	}
	if me == 0 {
		got := win.Local()[:n]
		for i := range got {
			if want := float64(round) + float64(i); got[i] != want {
				return fmt.Errorf("round %d, %d elements: element %d came back as %v, want %v", round, n, i, got[i], want)
			}
		}
	}
	return nil
}

type stats struct{ mean, min, median, max float64 }

// summarize drops the fastest and slowest repetition and averages the rest.
func summarize(t []float64) stats {
	s := slices.Clone(t)
	slices.Sort(s)
	kept := s[1 : len(s)-1]
	var sum float64
	for _, v := range kept {
		sum += v
	}
	return stats{mean: sum / float64(len(kept)), min: s[0], median: s[len(s)/2], max: s[len(s)-1]}
}

// latencies measures rank 0's one-sided operations on rank 1's window,
// rank 1 taking no part: put of n bytes then flush, get of n bytes then
// flush (n = 8, 1 KiB, 4 KiB), and an 8-byte fetch-and-add. Each figure is
// the mean of reps repetitions of iters*100 operations, min and max dropped.
func latencies(_, _, reps, warmup, iters int) error {
	w, err := rma.Init()
	if err != nil {
		return err
	}
	defer w.Close()
	if w.Size() != 2 {
		return fmt.Errorf("run with 2 ranks (rmarun -n 2), not %d", w.Size())
	}
	const maxBytes = 4096
	win, err := rma.Allocate[byte](w, maxBytes)
	if err != nil {
		return err
	}
	defer win.Free()
	src, err := rma.Allocate[byte](w, maxBytes)
	if err != nil {
		return err
	}
	defer src.Free()
	ctr, err := rma.Allocate[int64](w, 1)
	if err != nil {
		return err
	}
	defer ctr.Free()
	win.Fence(0)
	ctr.Fence(0)
	n := iters * 100
	if w.Rank() == 0 {
		fmt.Printf("# rmago one-sided latency, provider %s, %d reps of %d ops (min/max dropped), us per operation\n", w.Provider().Name, reps, n)
		fmt.Printf("%-16s %8s %10s %10s %10s\n", "operation", "bytes", "mean_us", "min_us", "max_us")
		times := make([]float64, reps)
		measure := func(name string, bytes int, op func() error) error {
			for rep := -warmup; rep < reps; rep++ {
				start := time.Now()
				for i := 0; i < n; i++ {
					if err := op(); err != nil {
						return err
					}
				}
				if rep >= 0 {
					times[rep] = float64(time.Since(start).Nanoseconds()) / 1e3 / float64(n)
				}
			}
			s := summarize(times)
			fmt.Printf("%-16s %8d %10.2f %10.2f %10.2f\n", name, bytes, s.mean, s.min, s.max)
			return nil
		}
		for _, b := range []int{8, 1024, 4096} {
			if err := measure("put+flush", b, func() error {
				if err := win.Put(src.Local()[:b], 1, 0); err != nil {
					return err
				}
				return win.Flush(1)
			}); err != nil {
				return err
			}
		}
		for _, b := range []int{8, 1024, 4096} {
			if err := measure("get+flush", b, func() error {
				if err := win.Get(src.Local()[:b], 1, 0); err != nil {
					return err
				}
				return win.Flush(1)
			}); err != nil {
				return err
			}
		}
		var want int64
		if err := measure("fetch-add", 8, func() error {
			old, err := ctr.FetchAndOp(1, 1, 0, rma.Sum)
			if err == nil && old != want {
				err = fmt.Errorf("fetch-add returned %d, want %d", old, want)
			}
			want++
			return err
		}); err != nil {
			return err
		}
	}
	if err := ctr.Fence(rma.NoSucceed); err != nil {
		return err
	}
	return win.Fence(rma.NoSucceed)
}
