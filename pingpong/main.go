// Command pingpong is rmago's benchmark suite, run under rmarun:
//
//	rmarun -n 2 ./pingpong [oneone] [flags]       one-to-one ping-pong (default)
//	rmarun -n N ./pingpong onemany [flags]        one root, N-1 peers
//	rmarun -n 2 ./pingpong osu -b BENCH [flags]   OSU-style one-sided suite
//	rmarun -n 2 ./pingpong lat [flags]            put+flush, get+flush, fetch-add latency
//	./pingpong plot -o out.svg a.json b.json      latency/bandwidth plots (SVG and PNG)
//	./pingpong import -o mpi.json mpi.csv         MPI ping-pong CSV (ci/compare) to JSON
//	./pingpong table a.json b.json ...            Markdown tables, ratios to the first system
//
// # One-to-one
//
// The ping-pong of X. Shi, "Safe, Fast and Elegant Communication in Rust"
// (Leiden University, 2024), section 5.1, which measured an MPI RMA binding
// this way (docs/benchmarks.md). A window of n float64 per rank. One round
// trip in its protocol (-mode fence3) is: fence; rank 0 puts n elements
// into rank 1; fence; rank 1 puts them back into rank 0; fence. Sizes are
// n = 2^min … 2^max elements (default 2^0 … 2^20). Per size, reps repetitions (default 12) of
// iters round trips each are timed after warm-up; the fastest and slowest
// repetition are dropped and the mean reported, with min, median and max of
// all repetitions. -single is that study's method exactly: no warm-up, one
// round trip per repetition. Modes (-mode, comma-separated, or all):
//
//	fence3   fence, put, fence, put back, fence (3 fences per round trip)
//	fence2   steady state: put, fence, put back, fence (2 fences)
//	pscw     rank 0: start, put, complete, post, wait; rank 1 the mirror
//	lock     exclusive lock, put the data, flush, set the peer's flag with
//	         Accumulate(Replace), unlock; the peer polls its flag with
//	         LoadLocal, then Sync, then reads the data, and answers the same way
//	lockall  as lock inside one LockAll epoch per rank, with Flush
//	get      fence, rank 1 gets n elements from rank 0, fence, rank 0 gets
//	         them back, fence (the targets pull)
//
// # One-to-many
//
// One root (rank 0) and N-1 peers: the root puts n elements to every peer
// in one epoch, each peer puts them back into its own slot of the root's
// window (peer i at element (i-1)*n). Modes fence3, fence2 and pscw. Run
// it once per N to report round-trip time by N.
//
// # OSU-style suite
//
// The OSU micro-benchmarks' one-sided tests over the same library, with
// OSU's definitions: message sizes 1 B … 4 MiB, 10000 iterations after 100
// skipped ones (1000 and 10 above 8 KiB) for latency, 100 and 10 (20 and 2)
// with a window of 64 back-to-back puts for bandwidth, one-way latency for
// fence and PSCW = round trip / 2. -b put_latency|get_latency|put_bw|
// put_bibw|acc_latency|fop_latency|cas_latency|all, -s fence|lock|flush|
// flush_local|lock_all|pscw, -w allocate|create.
//
// # Output and checks
//
// Rank 0 prints a table on stdout; -json FILE writes the results with
// metadata (go-json), -csv FILE a CSV with a header row (elements, ranks,
// the repetitions in µs, as that study's CSV, then benchmark, mode, bytes
// and metric). Every benchmark checks the data it moved; a mismatch ends
// the run with a non-zero exit status. Sweeps longer than a few
// seconds print a progress line on stderr. -quick runs a few small sizes
// with few repetitions (the tests use it).
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
)

// subcommands maps a subcommand name to its entry point.
var subcommands = map[string]func(args []string) error{
	"oneone":  runOneOne,
	"onemany": runOneMany,
	"osu":     runOSU,
	"lat":     runLat,
	"plot":    runPlot,
	"import":  runImport,
	"table":   runTable,
	"goals":   runGoals,
}

func main() {
	if err := dispatch(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		// A command-line mistake is the same on every rank: rank 0 says it.
		var ue usageError
		isUsage := errors.As(err, &ue)
		if !isUsage || printsUsage() {
			fmt.Fprintln(os.Stderr, "pingpong:", err)
		}
		if isUsage {
			os.Exit(2)
		}
		os.Exit(1)
	}
}

// dispatch runs the subcommand args name, one-to-one by default. The old
// spelling "-lat" still selects the lat subcommand.
func dispatch(args []string) error {
	if len(args) > 0 {
		if run, ok := subcommands[args[0]]; ok {
			return run(args[1:])
		}
		if args[0] == "help" || args[0] == "-h" || args[0] == "-help" || args[0] == "--help" {
			usage()
			return nil
		}
	}
	if i := slices.Index(args, "-lat"); i >= 0 {
		return runLat(slices.Delete(slices.Clone(args), i, i+1))
	}
	return runOneOne(args)
}

func usage() {
	if !printsUsage() {
		return
	}
	fmt.Fprint(os.Stderr, `usage: rmarun -n N pingpong [subcommand] [flags]

subcommands:
  oneone   one-to-one ping-pong (default): -mode fence3,fence2,pscw,lock,lockall,get|all
  onemany  one root, N-1 peers: -mode fence3,fence2,pscw|all
  osu      OSU-style one-sided suite: -b BENCH -s SYNC -w allocate|create
  lat      put+flush, get+flush and fetch-add latency
  plot     pingpong plot -o out.svg a.json [b.json ...] (also writes out.png)
  import   pingpong import -o mpi.json mpi.csv (the C ping-pong's CSV)
  table    pingpong table [-base SYSTEM] a.json b.json ...: Markdown tables with ratios
  goals    pingpong goals DIR: the issues' goals against make compare's OUT

'pingpong SUBCOMMAND -h' lists a subcommand's flags.
`)
}

// usageError is a mistake in the command line (exit status 2).
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return usageError{fmt.Sprintf(format, args...)}
}
