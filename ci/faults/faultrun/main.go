// Command faultrun is the driver of rmago's fault-injection suite (make
// test-faults). For every scenario, a fault crossed with an epoch mode, it
// runs trials: it starts a job of 2-8 faultrank processes directly (the
// internal/launch environment contract, one process per rank, so it knows
// which pid is which rank), waits for the faulty rank's fault point, makes
// the fault (SIGKILL, SIGSTOP with or without a later SIGCONT; the faulty
// rank makes its own early Close or stops reading; hostile connections to
// the rendezvous port during start-up), and then counts, per scenario:
//
//   - survivors that got the right error: a class the fault allows (see
//     faults.Expected), a message naming the faulty rank, no later than the
//     bound (RMAGO_TIMEOUT plus slack) after the fault; without a killed
//     rank (a pause, a bootstrap fault), ranks that finished normally;
//   - hangs: a rank still running at its deadline (the bound, plus one more
//     timeout for Close after the error, plus a margin), which is killed;
//   - orphans: processes of the trial (found in /proc by a marker in their
//     environment) still alive once every rank has been waited for;
//   - corrupted bytes: data a rank checked (every epoch, and its whole
//     window after the error) that is not what was written.
//
// It prints a line per trial (details for failed ones), a summary table,
// writes the table between marker comments in -out (docs/reliability.md),
// and exits 1 if any survivor missed the right error or any hang, orphan,
// corrupted byte or data race was seen.
//
// Usage:
//
//	faultrun -rank bin/faultrank [-trials N] [-timeout 3s] [-slack 2s]
//	         [-sizes 2,3,...] [-faults kill9,...] [-modes fence,...]
//	         [-parallel P] [-seed S] [-out docs/reliability.md] [-log DIR]
//
// FAULT_TRIALS, FAULT_PARALLEL and FAULT_SEED set the defaults of -trials,
// -parallel and -seed.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rmago/rmago/ci/faults"
)

// settings are the suite's parameters.
type settings struct {
	rankBin       string
	trials        int
	timeout       time.Duration // RMAGO_TIMEOUT of the ranks
	slack         time.Duration // the bound is timeout + slack
	margin        time.Duration
	sizes         []int
	parallel      int
	words         int // words per slot
	stopReadWords int // words per slot with StopRead (large puts)
	burst         int // StopRead: puts per epoch to the faulty rank
	seed          uint64
	provider      string // RMAGO_PROVIDER of the ranks: soft or shm
	out           string
	logDir        string
	verbose       bool
}

// bound is how long after the fault a survivor may take to get its error.
func (s *settings) bound() time.Duration { return s.timeout + s.slack }

// targetless reports whether, with fault f in mode m, the survivors'
// epochs need nothing of the faulty rank's process: on shm, puts, gets and
// atomics reach a stopped rank's memory without it (as a NIC would), so in
// the passive-target modes a stopped rank that holds no lock goes
// unnoticed until the survivors wait for it in a barrier.
func (s *settings) targetless(f faults.Fault, m faults.Mode) bool {
	return s.provider == "shm" && (f == faults.Stop || f == faults.StopCont) && (m == faults.Lock || m == faults.LockAll)
}

// exitBound is how long after the fault a rank that must end may run: the
// bound, one more timeout for Close (its barrier may wait for the faulty
// rank once more), and a margin.
func (s *settings) exitBound() time.Duration { return s.bound() + 2*s.timeout + s.margin }

// startLimit bounds the wait for the fault point: start-up and a few epochs.
func (s *settings) startLimit(n int) time.Duration {
	return 20*time.Second + time.Duration(n)*time.Second
}

// scenario is a fault crossed with a mode ("" for the bootstrap faults,
// whose trials rotate through the modes).
type scenario struct {
	fault faults.Fault
	mode  faults.Mode
}

func (sc scenario) String() string {
	if sc.mode == "" {
		return string(sc.fault)
	}
	return string(sc.fault) + "/" + string(sc.mode)
}

func main() {
	os.Exit(run())
}

func run() int {
	s := &settings{}
	var sizes, faultList, modeList string
	flag.StringVar(&s.rankBin, "rank", "bin/faultrank", "the faultrank binary")
	flag.StringVar(&s.provider, "provider", cmpOr(os.Getenv("FAULT_PROVIDER"), "soft"), "provider between the ranks: soft (TCP) or shm (shared memory; stopread, a fault of sockets, is left out of all) (env FAULT_PROVIDER)")
	flag.IntVar(&s.trials, "trials", envInt("FAULT_TRIALS", 5), "trials per scenario (env FAULT_TRIALS)")
	flag.DurationVar(&s.timeout, "timeout", 3*time.Second, "RMAGO_TIMEOUT of the ranks")
	flag.DurationVar(&s.slack, "slack", 2*time.Second, "the bound on a survivor's error is -timeout plus this")
	flag.DurationVar(&s.margin, "margin", 3*time.Second, "a rank still running this long after the bound plus one more timeout hung")
	flag.StringVar(&sizes, "sizes", "2,3,4,5,6,7,8", "job sizes; trials rotate through them")
	flag.StringVar(&faultList, "faults", "all", "faults to run, comma-separated, or all")
	flag.StringVar(&modeList, "modes", "all", "modes to run, comma-separated, or all")
	flag.IntVar(&s.parallel, "parallel", envInt("FAULT_PARALLEL", 3), "trials run at once (env FAULT_PARALLEL)")
	flag.IntVar(&s.words, "words", 512, "8-byte words each rank puts to each rank per epoch")
	flag.IntVar(&s.stopReadWords, "stopread-words", 128<<10, "words per put with the stopread fault (large puts fill socket buffers)")
	flag.IntVar(&s.burst, "burst", 32, "stopread: puts per epoch to the faulty rank from the fault on")
	seed := flag.Uint64("seed", uint64(envInt("FAULT_SEED", 0)), "random seed of the plan (0: from the clock; env FAULT_SEED)")
	flag.StringVar(&s.out, "out", "", "Markdown file whose fault-suite section to (re)write, e.g. docs/reliability.md")
	flag.StringVar(&s.logDir, "log", "", "directory for the details of every trial (with the whole output, and goroutine dumps, of the ranks that went wrong)")
	strict := flag.Bool("strict", os.Getenv("FAULT_STRICT") != "", "also fail when a survivor's error is wrong, late or does not name the faulty rank (env FAULT_STRICT); without it the suite fails on hangs, orphans, corruption and data races, and reports the rest")
	flag.BoolVar(&s.verbose, "v", false, "print every rank's events for every trial (failed trials always show the ranks that went wrong)")
	flag.Parse()

	var err error
	if s.sizes, err = parseSizes(sizes); err != nil {
		return usage("-sizes: %v", err)
	}
	switch s.provider {
	case "soft", "shm":
	default:
		return usage("-provider must be soft or shm, not %q", s.provider)
	}
	all := faults.AllFaults
	if s.provider == "shm" {
		// Its data moves through shared memory, not sockets: a rank that
		// stops reading its sockets stalls nobody.
		all = slices.DeleteFunc(slices.Clone(all), func(f faults.Fault) bool { return f == faults.StopRead })
	}
	fs, err := parseList(faultList, all)
	if err != nil {
		return usage("-faults: %v", err)
	}
	ms, err := parseList(modeList, faults.AllModes)
	if err != nil {
		return usage("-modes: %v", err)
	}
	switch {
	case s.trials < 1:
		return usage("-trials must be at least 1")
	case s.parallel < 1:
		return usage("-parallel must be at least 1")
	case s.timeout <= 0:
		return usage("-timeout must be positive")
	}
	if _, err := os.Stat(s.rankBin); err != nil {
		return usage("-rank: %v", err)
	}
	s.seed = *seed
	if s.seed == 0 {
		s.seed = uint64(time.Now().UnixNano())
	}
	if s.logDir != "" {
		if err := os.MkdirAll(s.logDir, 0o755); err != nil {
			return usage("-log: %v", err)
		}
	}

	plan := makePlan(s, fs, ms)
	fmt.Printf("faultrun: %s provider, %d trials (%d per scenario), RMAGO_TIMEOUT=%v, bound %v, hang after %v, sizes %v, %d at once, seed %d, %d CPUs\n",
		s.provider, len(plan), s.trials, s.timeout, s.bound(), s.exitBound(), s.sizes, s.parallel, s.seed, runtime.NumCPU())
	start := time.Now()
	tallies := runPlan(s, plan)
	wall := time.Since(start)

	table := summary(s, tallies, wall)
	fmt.Print("\n", table)
	if s.out != "" {
		if err := writeSection(s.out, s.provider, table); err != nil {
			fmt.Fprintln(os.Stderr, "faultrun:", err)
			return 1
		}
		fmt.Println("faultrun: wrote", s.out)
	}
	if s.logDir != "" {
		fmt.Println("faultrun: the details of every trial are in", s.logDir)
	}
	survivors, right, pass := 0, 0, true
	for _, t := range tallies {
		survivors += t.survivors
		right += t.right
		if !t.safe() || *strict && !t.ok() {
			pass = false
		}
	}
	if !pass {
		fmt.Printf("faultrun: FAIL (see the table above); %d of %d survivors right\n", right, survivors)
		return 1
	}
	fmt.Printf("faultrun: PASS: no hang, orphan, corrupted byte or data race; %d of %d survivors right\n", right, survivors)
	return 0
}

// makePlan lists every trial, scenario by scenario, with its job size
// (rotating through the sizes, from a different place per scenario), its
// faulty rank, fault epoch and signal delay drawn from the seed.
func makePlan(s *settings, fs []faults.Fault, ms []faults.Mode) []spec {
	rng := rand.New(rand.NewPCG(s.seed, 0x6661756c7473))
	var plan []spec
	k := 0
	add := func(sc scenario) {
		for i := range s.trials {
			sp := spec{scen: sc, index: i, mode: sc.mode, n: s.sizes[(i+k)%len(s.sizes)], faulty: -1}
			if sc.mode == "" {
				sp.mode = ms[(i+k)%len(ms)]
			}
			if !sc.fault.Bootstrap() {
				sp.faulty = rng.IntN(sp.n)
				sp.at = faults.FirstEpoch + 1 + rng.IntN(4)
				sp.jitter = time.Duration(rng.IntN(20_000)) * time.Microsecond
			}
			plan = append(plan, sp)
		}
		k++
	}
	for _, f := range fs {
		if f.Bootstrap() {
			add(scenario{fault: f})
			continue
		}
		for _, m := range ms {
			add(scenario{fault: f, mode: m})
		}
	}
	return plan
}

// runPlan runs the trials, s.parallel at a time, printing each as it ends,
// and tallies them by scenario (in plan order). SIGINT or SIGTERM ends the
// run at once: every rank still running is killed first (their Pdeathsig
// would kill them anyway when this process dies).
func runPlan(s *settings, plan []spec) []*tally {
	var order []scenario
	byScen := map[scenario]*tally{}
	for _, sp := range plan {
		if byScen[sp.scen] == nil {
			byScen[sp.scen] = &tally{scen: sp.scen}
			order = append(order, sp.scen)
		}
	}
	sigc := make(chan os.Signal, 1)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	go func() {
		sig := <-sigc
		fmt.Fprintf(os.Stderr, "faultrun: %v: killing the running trials\n", sig)
		killAll()
		os.Exit(128 + int(sig.(syscall.Signal)))
	}()

	var mu sync.Mutex
	next := 0
	var wg sync.WaitGroup
	for range s.parallel {
		wg.Go(func() {
			for {
				mu.Lock()
				if next == len(plan) {
					mu.Unlock()
					return
				}
				sp := plan[next]
				next++
				mu.Unlock()
				r := runTrial(s, sp)
				mu.Lock()
				byScen[sp.scen].add(&r)
				fmt.Print(r.log)
				if s.logDir != "" {
					name := strings.NewReplacer("/", "-", " ", "_", "#", "").Replace(sp.String()) + ".log"
					os.WriteFile(filepath.Join(s.logDir, name), []byte(r.log+"\n"+strings.Join(r.outputs, "\n")), 0o644)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	var out []*tally
	for _, sc := range order {
		out = append(out, byScen[sc])
	}
	return out
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

func parseSizes(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2 || n > faults.MaxRanks {
			return nil, fmt.Errorf("%q is not a job size in 2..%d", f, faults.MaxRanks)
		}
		out = append(out, n)
	}
	return out, nil
}

func parseList[T ~string](s string, all []T) ([]T, error) {
	if s == "all" {
		return all, nil
	}
	var out []T
	for f := range strings.SplitSeq(s, ",") {
		v := T(strings.TrimSpace(f))
		if !slices.Contains(all, v) {
			return nil, fmt.Errorf("unknown %q (known: %v)", f, all)
		}
		out = append(out, v)
	}
	return out, nil
}

func usage(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "faultrun: "+format+"\n", args...)
	flag.Usage()
	return 2
}
