package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/rmago/rmago/rma"
)

// common holds the flags every measuring subcommand takes.
type common struct {
	jsonPath string
	csvPath  string
	label    string
	window   string // allocate or create
	quick    bool
	noProg   bool
	cpuProf  string        // -cpuprofile: each rank's CPU profile goes to this path plus "." and its rank
	settle   time.Duration // -settle: busy time before the first measurement (settle.go)
}

func (c *common) register(fs *flag.FlagSet) {
	fs.StringVar(&c.jsonPath, "json", "", "write the results with metadata to this JSON `file`")
	fs.StringVar(&c.csvPath, "csv", "", "write the results as CSV (header row; elements, ranks, one column per repetition, bench, sync, bytes, metric) to this `file`")
	fs.StringVar(&c.label, "label", "", "system name in the JSON and on plots (default \"rmago <provider>\")")
	fs.StringVar(&c.window, "w", "allocate", "window kind: allocate (library memory) or create (a Go slice)")
	fs.BoolVar(&c.quick, "quick", false, "a few small sizes and few repetitions (smoke test)")
	fs.BoolVar(&c.noProg, "no-progress", false, "no progress lines on stderr")
	fs.StringVar(&c.cpuProf, "cpuprofile", "", "write each rank's CPU profile to `file`.RANK (for go tool pprof)")
	fs.DurationVar(&c.settle, "settle", defaultSettle, "keep each rank busy this long before the first measurement, so that a fresh process's runtime has settled (0: not at all)")
}

func (c *common) check() error {
	if c.window != "allocate" && c.window != "create" {
		return usagef("-w %q: want allocate or create", c.window)
	}
	if c.settle < 0 {
		return usagef("-settle must not be negative")
	}
	return nil
}

// sweep holds the flags of the ping-pong sweeps (one-to-one, one-to-many).
type sweep struct {
	common
	minExp, maxExp int
	reps, warmup   int
	iters          int  // round trips per repetition; 0: automatic
	single         bool // -single: no warm-up, one round trip per repetition
	modes          string
}

func (s *sweep) register(fs *flag.FlagSet, modes string) {
	s.common.register(fs)
	fs.IntVar(&s.minExp, "min", 0, "smallest size is 2^min float64 elements")
	fs.IntVar(&s.maxExp, "max", 20, "largest size is 2^max float64 elements")
	fs.IntVar(&s.reps, "reps", 12, "timed repetitions per size (the fastest and slowest are dropped)")
	fs.IntVar(&s.warmup, "warmup", 1, "untimed repetitions per size before the timed ones")
	fs.IntVar(&s.iters, "iters", 0, "round trips per repetition (0: about 1.6 MB moved per repetition, 2 to 200)")
	fs.BoolVar(&s.single, "single", false, "no warm-up and one round trip per repetition (the method of the Rust RMA study in docs/benchmarks.md)")
	fs.StringVar(&s.modes, "mode", modes, "synchronization modes, comma-separated, or all")
}

// finish applies -quick and -single and checks the values.
func (s *sweep) finish(fs *flag.FlagSet, all []string) ([]string, error) {
	if err := s.common.check(); err != nil {
		return nil, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if s.quick {
		if !set["max"] {
			s.maxExp = min(3, s.maxExp)
		}
		if !set["reps"] {
			s.reps = 3
		}
		if !set["iters"] {
			s.iters = 2
		}
		if !set["warmup"] {
			s.warmup = 0
		}
	}
	if s.single {
		s.warmup, s.iters = 0, 1
		if !set["settle"] {
			s.settle = 0
		}
	}
	switch {
	case s.minExp < 0 || s.maxExp < s.minExp || s.maxExp > 30:
		return nil, usagef("need 0 <= -min <= -max <= 30")
	case s.reps < 3:
		return nil, usagef("-reps must be at least 3 (the fastest and slowest are dropped)")
	case s.iters < 0 || s.warmup < 0:
		return nil, usagef("-iters and -warmup must not be negative")
	}
	return parseModes(s.modes, all)
}

// itersFor is the number of round trips per repetition for n elements.
func (s *sweep) itersFor(n int) int {
	if s.iters > 0 {
		return s.iters
	}
	return min(200, max(2, 200*1024/n))
}

// parseModes splits a comma-separated mode list, "all" meaning all.
func parseModes(list string, all []string) ([]string, error) {
	if list == "all" {
		return all, nil
	}
	var out []string
	for _, m := range strings.Split(list, ",") {
		m = strings.TrimSpace(m)
		ok := false
		for _, a := range all {
			ok = ok || a == m
		}
		if !ok {
			return nil, usagef("unknown mode %q (have %s, all)", m, strings.Join(all, ", "))
		}
		out = append(out, m)
	}
	return out, nil
}

// newFlagSet is a flag set that reports errors instead of exiting. Its
// usage (which Parse prints once, for -h and for a bad flag) goes to
// stderr, and only from one rank of a job (see printsUsage).
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		if !printsUsage() {
			return
		}
		fs.SetOutput(os.Stderr)
		fmt.Fprintf(os.Stderr, "usage: %s\n", synopsis)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
	return fs
}

// parseFlags parses args; flag errors become usage errors, and -h returns
// flag.ErrHelp (main exits 0). Parse itself has printed the usage.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	return nil
}

// parse is parseFlags for the measuring subcommands, which take no
// arguments besides their flags.
func parse(fs *flag.FlagSet, args []string) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usagef("unexpected argument %q", fs.Arg(0))
	}
	return nil
}

// rankEnv lists the variables in which the launchers rmago joins (rmarun,
// Slurm, Hydra, PMIx launchers such as Open MPI's mpirun) give a process
// its rank.
var rankEnv = []string{"RMAGO_RANK", "SLURM_PROCID", "PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK"}

// printsUsage reports whether this process prints usage and command-line
// errors: every rank of a job parses the same command line, so only rank 0
// (or a process started by no launcher) does, and a job's -h prints once.
func printsUsage() bool {
	for _, v := range rankEnv {
		if r, ok := os.LookupEnv(v); ok && r != "" {
			return r == "0"
		}
	}
	return true
}

// newWindow makes a window of n elements of the kind -w asked for.
func newWindow[T rma.Number](w *rma.World, n int, kind string) (*rma.Window[T], error) {
	if kind == "create" {
		return rma.Create(w, make([]T, n))
	}
	return rma.Allocate[T](w, n)
}

// checkMemory refuses a sweep whose windows would not fit in the memory
// the system has available (MemAvailable in /proc/meminfo, where there is
// one): each rank needs bytes of window and origin memory, and all ranks
// of the job run on this host under rmarun.
func checkMemory(nbytes, ranks int) error {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "MemAvailable:" {
			kb, err := strconv.Atoi(f[1])
			if err != nil {
				return nil
			}
			if need := uint64(nbytes) * uint64(ranks); need > uint64(kb)*1024*9/10 {
				return usagef("the windows need %.1f GiB (%d ranks), more than the %.1f GiB available: lower -max",
					float64(need)/(1<<30), ranks, float64(kb)/(1<<20))
			}
			return nil
		}
	}
	return nil
}
