package main

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/rmago/rmago/rma"
)

// The OSU micro-benchmarks' one-sided tests, with OSU's definitions.
var (
	osuBenches = []string{"put_latency", "get_latency", "put_bw", "put_bibw", "acc_latency", "fop_latency", "cas_latency"}
	osuSyncs   = []string{"fence", "lock", "flush", "flush_local", "lock_all", "pscw"}
)

// OSU's defaults (osu_util): latency tests run 10000 iterations after 100
// skipped ones, 1000 after 10 above 8 KiB; bandwidth tests 100 after 10,
// 20 after 2 above 8 KiB, each iteration a window of 64 puts.
const (
	osuLargeSize   = 8192
	osuLatIters    = 10000
	osuLatSkip     = 100
	osuLatItersBig = 1000
	osuLatSkipBig  = 10
	osuBWIters     = 100
	osuBWSkip      = 10
	osuBWItersBig  = 20
	osuBWSkipBig   = 2
	osuWindow      = 64
	osuMaxSize     = 1 << 22
)

type osuOpts struct {
	common
	benches, syncs []string
	minSize        int
	maxSize        int
	iters, skip    int // 0: OSU's defaults
	window         int
	reps           int
	heap           bool // origin buffers on the Go heap (through the bounce buffer)
}

func runOSU(args []string) error {
	var o osuOpts
	fs := newFlagSet("osu", "rmarun -n 2 pingpong osu [-b BENCH,...|all] [-s SYNC,...|all] [-w allocate|create] [-m MIN:MAX] [-i ITERS] [-x SKIP] [-W WINDOW] [-quick] [-json F]")
	o.common.register(fs)
	b := fs.String("b", "put_latency", "benchmarks, comma-separated, or all: "+strings.Join(osuBenches, ", "))
	s := fs.String("s", "", "synchronizations, comma-separated, or all: "+strings.Join(osuSyncs, ", ")+" (default: OSU's, flush; pscw for put_bibw)")
	m := fs.String("m", "", "message sizes MIN:MAX in bytes (default 1:4194304; 8:... for the atomics)")
	fs.IntVar(&o.iters, "i", 0, "timed iterations per size (default OSU's: 10000, 1000 above 8 KiB; bandwidth 100, 20)")
	fs.IntVar(&o.skip, "x", -1, "untimed warm-up iterations per size (default OSU's: 100, 10 above 8 KiB; bandwidth 10, 2)")
	fs.IntVar(&o.window, "W", osuWindow, "puts per iteration in the bandwidth tests")
	fs.IntVar(&o.reps, "reps", 1, "repetitions of each measurement (OSU: 1); with 3 or more the fastest and slowest are dropped")
	fs.BoolVar(&o.heap, "heap", false, "origin buffers on the Go heap instead of registered memory")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := o.common.check(); err != nil {
		return err
	}
	var err error
	if o.benches, err = parseModes(*b, osuBenches); err != nil {
		return err
	}
	if *s != "" {
		if o.syncs, err = parseModes(*s, osuSyncs); err != nil {
			return err
		}
	}
	o.minSize, o.maxSize = 1, osuMaxSize
	if o.quick {
		o.maxSize = 64
		if o.iters == 0 {
			o.iters = 20
		}
		if o.skip < 0 {
			o.skip = 2
		}
	}
	if *m != "" {
		lo, hi, ok := strings.Cut(*m, ":")
		a, err1 := strconv.Atoi(lo)
		z, err2 := strconv.Atoi(hi)
		if !ok || err1 != nil || err2 != nil || a < 1 || z < a {
			return usagef("-m %q: want MIN:MAX bytes, 1 <= MIN <= MAX", *m)
		}
		o.minSize, o.maxSize = a, z
	}
	if o.iters < 0 || o.window < 1 || o.reps < 1 {
		return usagef("need -i >= 0, -W >= 1, -reps >= 1")
	}
	j, err := startJob(&o.common, "OSU-style one-sided benchmarks", 2, 2)
	if err != nil {
		return err
	}
	return j.finish(osuSuite(j, &o))
}

// syncsFor is the synchronizations to run bench with.
func (o *osuOpts) syncsFor(bench string) []string {
	valid := osuSyncs
	def := "flush"
	if bench == "put_bibw" {
		valid, def = []string{"fence", "pscw"}, "pscw"
	}
	if o.syncs == nil {
		return []string{def}
	}
	var out []string
	for _, s := range o.syncs {
		if slices.Contains(valid, s) {
			out = append(out, s)
		}
	}
	return out
}

// sizes is the message sizes for bench: powers of two from -m's range;
// the atomics work on 8-byte words.
func (o *osuOpts) sizes(bench string) []int {
	lo := o.minSize
	switch bench {
	case "fop_latency", "cas_latency":
		return []int{8}
	case "acc_latency":
		lo = max(lo, 8)
	}
	var out []int
	for s := 1; s <= o.maxSize; s *= 2 {
		if s >= lo {
			out = append(out, s)
		}
	}
	return out
}

// loops is OSU's (iterations, skip) for bench at size, unless -i/-x say.
func (o *osuOpts) loops(bench string, size int) (int, int) {
	it, sk := osuLatIters, osuLatSkip
	switch {
	case strings.HasSuffix(bench, "_bw") || strings.HasSuffix(bench, "_bibw"):
		it, sk = osuBWIters, osuBWSkip
		if size > osuLargeSize {
			it, sk = osuBWItersBig, osuBWSkipBig
		}
	case size > osuLargeSize:
		it, sk = osuLatItersBig, osuLatSkipBig
	}
	if o.iters > 0 {
		it = o.iters
	}
	if o.skip >= 0 {
		sk = o.skip
	}
	return it, sk
}

func osuSuite(j *job, o *osuOpts) error {
	steps, step := 0, 0
	for _, b := range o.benches {
		steps += len(o.syncsFor(b)) * len(o.sizes(b))
	}
	for _, b := range o.benches {
		for _, s := range o.syncsFor(b) {
			for _, size := range o.sizes(b) {
				j.prog.step(fmt.Sprintf("osu %s -s %s, %d bytes", b, s, size), step, steps)
				var err error
				switch b {
				case "acc_latency", "fop_latency", "cas_latency":
					err = osuOne[int64](j, o, b, s, size)
				default:
					err = osuOne[byte](j, o, b, s, size)
				}
				if err != nil {
					return fmt.Errorf("%s -s %s, %d bytes: %w", b, s, size, err)
				}
				step++
			}
		}
	}
	return nil
}

// osuCase is one benchmark at one size: a fresh window, as OSU makes one
// per size, and the origin buffer.
type osuCase[T rma.Number] struct {
	j          *job
	bench      string
	syncMode   string
	size       int // bytes per message
	count      int // elements per message
	puts       int // messages per iteration (the bandwidth window)
	me, peer   int
	win        *rma.Window[T]
	origin     []T
	originWin  *rma.Window[T]
	ops        int // operations this rank issued (fetch-and-op, compare-and-swap: the expected old value)
	issued     int // operations rank 0 issues in all: what a one-way target receives
	checkValue error
}

func osuOne[T rma.Number](j *job, o *osuOpts, bench, syncMode string, size int) (err error) {
	var ws windows
	defer func() { ws.free(&err) }()
	var zero T
	esize := int(unsafe.Sizeof(zero))
	c := &osuCase[T]{j: j, bench: bench, syncMode: syncMode, size: size, count: max(1, size/esize), puts: 1,
		me: j.w.Rank(), peer: 1 - j.w.Rank()}
	if strings.HasSuffix(bench, "bw") {
		c.puts = o.window
	}
	total := c.count * c.puts
	if c.win, err = newWindow[T](j.w, total, o.window2()); err != nil {
		return err
	}
	ws = append(ws, c.win)
	if o.heap {
		c.origin = make([]T, total)
	} else {
		if c.originWin, err = rma.Allocate[T](j.w, total); err != nil {
			return err
		}
		ws = append(ws, c.originWin)
		c.origin = c.originWin.Local()
	}
	c.prepare()
	if err := j.w.Barrier(); err != nil {
		return err
	}
	j.settleOnce()
	iters, skip := o.loops(bench, size)
	c.issued = o.reps * (iters + skip)
	samples := make([]float64, o.reps)
	for rep := range samples {
		t, err := c.run(iters, skip)
		if err != nil {
			return err
		}
		samples[rep] = c.value(t, iters)
	}
	if err := j.w.Barrier(); err != nil {
		return err
	}
	if err := c.check(); err != nil {
		return err
	}
	metric := MetricLatency
	if c.puts > 1 || strings.HasSuffix(bench, "bw") {
		metric = MetricBW
	}
	r := Result{Bench: bench, Sync: syncMode, Window: o.window2(), Ranks: 2, Bytes: size,
		Metric: metric, Iters: iters, Verified: true}
	r.summarize(samples)
	j.add(r)
	return nil
}

func (o *osuOpts) window2() string { return o.common.window }

// pattern is the byte or element a rank puts at index i.
func pattern[T rma.Number](rank, size, i int) T {
	return T((i*31 + size + rank*101) & 0x7f)
}

// prepare fills the origin buffer (puts) or the window (gets) with this
// rank's pattern.
func (c *osuCase[T]) prepare() {
	switch c.bench {
	case "put_latency", "put_bw", "put_bibw":
		for i := range c.origin {
			c.origin[i] = pattern[T](c.me, c.size, i)
		}
	case "get_latency":
		for i := range c.win.Local() {
			c.win.Local()[i] = pattern[T](c.me, c.size, i)
		}
	case "acc_latency":
		for i := range c.origin {
			c.origin[i] = 1
		}
	}
}

// op issues one iteration's operations to target.
func (c *osuCase[T]) op(target int) error {
	c.ops++
	n := c.count
	switch c.bench {
	case "put_latency":
		return c.win.Put(c.origin[:n], target, 0)
	case "get_latency":
		return c.win.Get(c.origin[:n], target, 0)
	case "put_bw", "put_bibw":
		for k := range c.puts {
			if err := c.win.Put(c.origin[k*n:(k+1)*n], target, k*n); err != nil {
				return err
			}
		}
		return nil
	case "acc_latency":
		return c.win.Accumulate(c.origin[:n], target, 0, rma.Sum)
	case "fop_latency":
		old, err := c.win.FetchAndOp(1, target, 0, rma.Sum)
		if err == nil && old != T(c.ops-1) && c.checkValue == nil {
			c.checkValue = fmt.Errorf("DATA VERIFICATION FAILED: fetch-and-op %d returned %v, want %d", c.ops, old, c.ops-1)
		}
		return err
	case "cas_latency":
		want := T(c.ops - 1)
		old, err := c.win.CompareAndSwap(want, want+1, target, 0)
		if err == nil && old != want && c.checkValue == nil {
			c.checkValue = fmt.Errorf("DATA VERIFICATION FAILED: compare-and-swap %d returned %v, want %v", c.ops, old, want)
		}
		return err
	}
	return fmt.Errorf("unknown benchmark %s", c.bench)
}

// both says whether both ranks issue operations (fence and PSCW latency,
// and the bidirectional bandwidth).
func (c *osuCase[T]) both() bool {
	return c.bench == "put_bibw" ||
		(!strings.HasSuffix(c.bench, "_bw") && (c.syncMode == "fence" || c.syncMode == "pscw"))
}

// run does skip untimed and iters timed iterations under the case's
// synchronization, OSU's way; it returns rank 0's time for the timed ones.
func (c *osuCase[T]) run(iters, skip int) (time.Duration, error) {
	win, me, peer := c.win, c.me, []int{c.peer}
	var start time.Time
	var err error
	mark := func(i int) {
		if i == skip {
			start = time.Now()
		}
	}
	bw := strings.HasSuffix(c.bench, "_bw")
	switch c.syncMode {
	case "fence":
		if !c.both() && me != 0 { // put_bw: the target only fences
			for i := 0; i < skip+iters && err == nil; i++ {
				err = errors.Join(win.Fence(0), win.Fence(0))
			}
			if err == nil {
				err = win.Fence(rma.NoSucceed)
			}
			break
		}
		for i := 0; i < skip+iters && err == nil; i++ {
			mark(i)
			switch {
			case bw || c.bench == "put_bibw":
				err = errors.Join(win.Fence(0), c.op(c.peer), win.Fence(0))
			case me == 0:
				err = errors.Join(win.Fence(0), c.op(1), win.Fence(0), win.Fence(0))
			default:
				err = errors.Join(win.Fence(0), win.Fence(0), c.op(0), win.Fence(0))
			}
		}
		if err == nil {
			err = win.Fence(rma.NoSucceed)
		}
	case "pscw":
		for i := 0; i < skip+iters && err == nil; i++ {
			switch {
			case c.bench == "put_bibw":
				mark(i)
				err = errors.Join(win.Post(peer, 0), win.Start(peer, 0), c.op(c.peer), win.Complete(), win.Wait())
			case bw && me == 0:
				err = win.Start(peer, 0)
				mark(i)
				err = errors.Join(err, c.op(1), win.Complete())
			case bw:
				err = errors.Join(win.Post(peer, 0), win.Wait())
			case me == 0:
				mark(i)
				err = errors.Join(win.Start(peer, 0), c.op(1), win.Complete(), win.Post(peer, 0), win.Wait())
			default:
				err = errors.Join(win.Post(peer, 0), win.Wait(), win.Start(peer, 0), c.op(0), win.Complete())
			}
		}
	case "lock":
		for i := 0; me == 0 && i < skip+iters && err == nil; i++ {
			mark(i)
			err = errors.Join(win.Lock(1, rma.Shared, 0), c.op(1), win.Unlock(1))
		}
	case "flush", "flush_local":
		if me != 0 {
			break
		}
		flush := win.Flush
		if c.syncMode == "flush_local" {
			flush = win.FlushLocal
		}
		err = win.Lock(1, rma.Shared, 0)
		for i := 0; i < skip+iters && err == nil; i++ {
			mark(i)
			err = errors.Join(c.op(1), flush(1))
		}
		elapsed := time.Since(start)
		if err == nil {
			err = win.Unlock(1)
		}
		return elapsed, err
	case "lock_all":
		for i := 0; me == 0 && i < skip+iters && err == nil; i++ {
			mark(i)
			err = errors.Join(win.LockAll(0), c.op(1), win.UnlockAll())
		}
	default:
		return 0, fmt.Errorf("unknown synchronization %q", c.syncMode)
	}
	return time.Since(start), err
}

// value turns rank 0's time for iters iterations into the result: µs per
// operation (one way: a round trip halved where both ranks take turns), or
// MB/s.
func (c *osuCase[T]) value(t time.Duration, iters int) float64 {
	sec := t.Seconds()
	switch {
	case c.bench == "put_bibw":
		return float64(c.size) / 1e6 * float64(iters*c.puts) * 2 / sec
	case strings.HasSuffix(c.bench, "_bw"):
		return float64(c.size) / 1e6 * float64(iters*c.puts) / sec
	case c.both():
		return sec * 1e6 / float64(2*iters)
	}
	return sec * 1e6 / float64(iters)
}

// check verifies what the benchmark moved, after the final barrier.
func (c *osuCase[T]) check() error {
	if c.checkValue != nil {
		return c.checkValue
	}
	target := c.me == 1 || c.both() // this rank's window received operations
	fail := func(what string, i int, got, want T) error {
		return fmt.Errorf("DATA VERIFICATION FAILED: rank %d, %s: element %d is %v, want %v", c.me, what, i, got, want)
	}
	switch c.bench {
	case "put_latency", "put_bw", "put_bibw":
		if !target {
			return nil
		}
		for i, v := range c.win.Local()[:c.count*c.puts] {
			if want := pattern[T](c.peer, c.size, i); v != want {
				return fail("window after the puts", i, v, want)
			}
		}
	case "get_latency":
		if c.ops == 0 {
			return nil
		}
		for i, v := range c.origin[:c.count] {
			if want := pattern[T](c.peer, c.size, i); v != want {
				return fail("buffer after the gets", i, v, want)
			}
		}
	case "acc_latency":
		if !target {
			return nil
		}
		// Every operation the peer issued added 1 to each element.
		want := T(c.peerOps())
		for i, v := range c.win.Local()[:c.count] {
			if v != want {
				return fail("window after the accumulates", i, v, want)
			}
		}
	case "fop_latency", "cas_latency":
		if !target {
			return nil
		}
		if v, want := c.win.Local()[0], T(c.peerOps()); v != want {
			return fail("word after the atomics", 0, v, want)
		}
	}
	return nil
}

// peerOps is the number of operations the peer issued to this rank: the
// same as this rank issued when both take turns, else all iterations of
// rank 0 (the only origin).
func (c *osuCase[T]) peerOps() int {
	if c.both() {
		return c.ops
	}
	return c.issued
}
