package main

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/rmago/rmago/rma"
)

func runLat(args []string) error {
	var c common
	fs := newFlagSet("lat", "rmarun -n 2 pingpong lat [-reps R] [-warmup W] [-iters I] [-json F]")
	c.register(fs)
	reps := fs.Int("reps", 12, "repetitions (the fastest and slowest are dropped)")
	warmup := fs.Int("warmup", 3, "untimed repetitions before the timed ones")
	iters := fs.Int("iters", 1, "hundreds of operations per repetition")
	ops := fs.String("ops", "put,get,fetch-add", "operations to measure, comma-separated: put (put+flush), get (get+flush), fetch-add")
	fs.Int("max", 0, "ignored (accepted for the ping-pong's command lines)")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	if c.quick {
		*reps, *warmup, *iters = 3, 0, 1
	}
	if *reps < 3 || *iters < 1 || *warmup < 0 {
		return usagef("need -reps >= 3, -iters >= 1, -warmup >= 0")
	}
	sel, err := latOps(*ops)
	if err != nil {
		return err
	}
	j, err := startJob(&c, "one-sided latency", 2, 2)
	if err != nil {
		return err
	}
	return j.finish(latencies(j, sel, *reps, *warmup, *iters*100))
}

// latSel says which of lat's operations run.
type latSel struct{ put, get, fetchAdd bool }

// latSizes is the sizes lat measures an operation at: none if it is off.
func latSizes(on bool) []int {
	if !on {
		return nil
	}
	return []int{8, 1024, 4096}
}

// latOps parses -ops.
func latOps(list string) (latSel, error) {
	var s latSel
	for _, op := range strings.Split(list, ",") {
		switch strings.TrimSpace(op) {
		case "put":
			s.put = true
		case "get":
			s.get = true
		case "fetch-add":
			s.fetchAdd = true
		default:
			return s, usagef("-ops: unknown operation %q (put, get, fetch-add)", op)
		}
	}
	return s, nil
}

// latencies measures rank 0's one-sided operations on rank 1's window,
// rank 1 taking no part, inside one LockAll epoch: put of n bytes then
// flush, get of n bytes then flush (n = 8, 1 KiB, 4 KiB), and an 8-byte
// fetch-and-add (those sel names). Each figure is per operation, over reps
// repetitions of n operations.
func latencies(j *job, sel latSel, reps, warmup, n int) (err error) {
	var ws windows
	defer func() { ws.free(&err) }()
	w := j.w
	const maxBytes = 4096
	win, err := newWindow[byte](w, maxBytes, j.opt.window)
	if err != nil {
		return err
	}
	ws = append(ws, win)
	src, err := rma.Allocate[byte](w, maxBytes)
	if err != nil {
		return err
	}
	ws = append(ws, src)
	ctr, err := rma.Allocate[int64](w, 1)
	if err != nil {
		return err
	}
	ws = append(ws, ctr)
	if w.Rank() == 1 {
		for i := range win.Local() {
			win.Local()[i] = byte(i * 7)
		}
	}
	if err := w.Barrier(); err != nil {
		return err
	}
	j.settleOnce()
	if w.Rank() == 0 {
		if err := errors2(win.LockAll(rma.NoCheck), ctr.LockAll(rma.NoCheck)); err != nil {
			return err
		}
		times := make([]float64, reps)
		stamps := make([]uint64, n+1)
		each := make([]float64, 0, reps*n)
		measure := func(name string, nbytes int, op func() error, check func() error) error {
			each = each[:0]
			for rep := -warmup; rep < reps; rep++ {
				start := time.Now()
				for i := range n {
					stamps[i] = cycles()
					if err := op(); err != nil {
						return err
					}
				}
				stamps[n] = cycles()
				elapsed := float64(time.Since(start).Nanoseconds()) / 1e3
				if rep >= 0 {
					times[rep] = elapsed / float64(n)
					each = opLatencies(each, stamps, elapsed)
				}
			}
			if err := check(); err != nil {
				return err
			}
			r := Result{Bench: "lat", Sync: name, Window: j.opt.window, Ranks: 2, Bytes: nbytes,
				Metric: MetricLatency, Iters: n, Verified: true, Typical: median(each)}
			r.summarize(times)
			j.add(r)
			return nil
		}
		for _, b := range latSizes(sel.put) {
			for i := range b {
				src.Local()[i] = byte(i*13 + b)
			}
			err := measure("put+flush", b, func() error {
				if err := win.Put(src.Local()[:b], 1, 0); err != nil {
					return err
				}
				return win.Flush(1)
			}, func() error { return nil }) // rank 1 checks what arrived below
			if err != nil {
				return err
			}
		}
		for _, b := range latSizes(sel.get) {
			err := measure("get+flush", b, func() error {
				if err := win.Get(src.Local()[:b], 1, 0); err != nil {
					return err
				}
				return win.Flush(1)
			}, func() error {
				// The last put left rank 1's first 4 KiB as put+flush wrote
				// them; without puts they are as rank 1 set them.
				for i := range b {
					want := byte(i * 7)
					if sel.put {
						want = byte(i*13 + 4096)
					}
					if src.Local()[i] != want {
						return fmt.Errorf("DATA VERIFICATION FAILED: get of %d bytes: byte %d is %d, want %d", b, i, src.Local()[i], want)
					}
				}
				return nil
			})
			if err != nil {
				return err
			}
		}
		if sel.fetchAdd {
			var want int64
			err := measure("fetch-add", 8, func() error {
				old, err := ctr.FetchAndOp(1, 1, 0, rma.Sum)
				if err == nil && old != want {
					err = fmt.Errorf("DATA VERIFICATION FAILED: fetch-add returned %d, want %d", old, want)
				}
				want++
				return err
			}, func() error { return nil })
			if err != nil {
				return err
			}
		}
		if err := errors2(win.UnlockAll(), ctr.UnlockAll()); err != nil {
			return err
		}
	}
	if err := w.Barrier(); err != nil {
		return err
	}
	if w.Rank() == 1 && sel.put {
		for i := range 4096 {
			if want := byte(i*13 + 4096); win.Local()[i] != want {
				return fmt.Errorf("DATA VERIFICATION FAILED: rank 1 after put+flush: byte %d is %d, want %d", i, win.Local()[i], want)
			}
		}
	}
	return w.Barrier()
}

// opLatencies appends the latency of each operation of one repetition,
// in µs, to each: stamps holds the cycle count before each operation and
// after the last, and elapsedUS, the repetition's time by the clock,
// gives the cycles' unit. A counter that went backwards (a move between
// cores whose counters differ) leaves that operation, or the repetition,
// out.
func opLatencies(each []float64, stamps []uint64, elapsedUS float64) []float64 {
	first, last := stamps[0], stamps[len(stamps)-1]
	if last <= first {
		return each
	}
	unit := elapsedUS / float64(last-first)
	for i := range len(stamps) - 1 {
		if stamps[i+1] >= stamps[i] {
			each = append(each, float64(stamps[i+1]-stamps[i])*unit)
		}
	}
	return each
}

// median is the middle value of v (the mean of the two middle ones for an
// even count), 0 for none; it sorts v.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func errors2(a, b error) error {
	if a != nil {
		return a
	}
	return b
}
