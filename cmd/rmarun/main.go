//go:build unix

// Command rmarun launches an rmago job: N local processes of one program.
//
// Usage:
//
//	rmarun [-n N] [-provider soft|ibv|auto] [-addr IP] [-timeout D] [-quiet-prefix] program [args...]
//
// Flags:
//
//	-n N            number of ranks to start (default 1)
//	-provider P     set RMAGO_PROVIDER to P (soft, ibv or auto) for every rank;
//	                without it, a value in rmarun's environment is inherited
//	-addr IP        IP address the ranks listen on (default 127.0.0.1)
//	-timeout D      kill the job after the Go duration D (default 0: no limit)
//	-quiet-prefix   do not prefix output lines with the rank
//
// Each rank runs with rmarun's environment plus:
//
//	RMAGO_RANK        rank of the process, 0..N-1
//	RMAGO_SIZE        N
//	RMAGO_RENDEZVOUS  host:port on which rank 0 listens for the bootstrap rendezvous
//	RMAGO_SECRET      per-job authentication key: 32 random bytes as 64 hex characters
//	RMAGO_ADDR        the -addr value
//	RMAGO_PROVIDER    the -provider value (only if the flag is given)
//	RMAGO_JOBID       short random hex identifier of the job
//
// The names are defined in package internal/launch.
//
// Standard input of every rank is /dev/null. Lines a rank writes to its
// standard output and standard error are copied to rmarun's, prefixed with
// "[rank] "; whole lines are written at once, so lines of different ranks never
// mix. Each rank runs in its own process group, which rmarun signals to stop
// it; on Linux the ranks are also killed if rmarun dies.
//
// Exit status: 0 if every rank exits 0. If a rank exits non-zero or is killed
// by a signal, rmarun reports it, stops the other ranks (SIGTERM, then SIGKILL
// after 2 seconds) and exits with that rank's status if it is in 1..125, or 1
// otherwise. SIGINT and SIGTERM received by rmarun are forwarded to the ranks
// (a second one kills them at once) and rmarun exits with 128 plus the signal
// number. When the timeout expires the job is stopped and rmarun exits 124.
// Usage errors exit 2.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/rmago/rmago/internal/launch"
)

const (
	gracePeriod = 2 * time.Second // between SIGTERM and SIGKILL
	exitTimeout = 124             // exit status after -timeout expires
	maxPending  = 64 << 10        // longest partial line held back, in bytes
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// run parses the command line, runs the job and returns the exit status.
func run(args []string) int {
	fs := flag.NewFlagSet("rmarun", flag.ContinueOnError)
	n := fs.Int("n", 1, "number of ranks to start")
	provider := fs.String("provider", "", "fabric `provider` for the ranks: soft, ibv or auto (default: inherit "+launch.EnvProvider+")")
	addr := fs.String("addr", launch.DefaultAddr, "`IP` address the ranks listen on")
	timeout := fs.Duration("timeout", 0, "kill the job after this `duration` (0: no limit)")
	quiet := fs.Bool("quiet-prefix", false, "do not prefix output lines with the rank")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: rmarun [-n N] [-provider soft|ibv|auto] [-addr IP] [-timeout D] [-quiet-prefix] program [args...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	providerSet := false
	fs.Visit(func(f *flag.Flag) { providerSet = providerSet || f.Name == "provider" })

	var problem string
	switch {
	case fs.NArg() == 0:
		problem = "no program given"
	case *n < 1:
		problem = "-n must be at least 1"
	case net.ParseIP(*addr) == nil:
		problem = fmt.Sprintf("-addr %q is not an IP address", *addr)
	case *timeout < 0:
		problem = "-timeout must not be negative"
	case providerSet && *provider != "soft" && *provider != "ibv" && *provider != "auto":
		problem = fmt.Sprintf("-provider %q is not soft, ibv or auto", *provider)
	}
	if problem != "" {
		fmt.Fprintln(os.Stderr, "rmarun:", problem)
		fs.Usage()
		return 2
	}

	j, err := newJob(*n, fs.Args(), *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "rmarun:", err)
		return 1
	}
	if providerSet {
		j.extraEnv = append(j.extraEnv, launch.EnvProvider+"="+*provider)
	}
	j.quiet, j.timeout = *quiet, *timeout
	return j.run()
}

// A job is a set of ranks started from the same command line.
type job struct {
	size       int
	argv       []string
	addr       string
	rendezvous string
	secret     string
	extraEnv   []string // entries for all ranks besides those of launch.Env
	quiet      bool
	timeout    time.Duration

	outMu  sync.Mutex  // serialises writes to stdout and stderr
	cmds   []*exec.Cmd // started ranks, by rank
	exited []bool      // whether cmds[rank] has been waited for
}

// newJob prepares a job of size ranks running argv, with a fresh secret, job
// id and rendezvous address on the IP address addr.
func newJob(size int, argv []string, addr string) (*job, error) {
	secret, err := launch.NewSecret()
	if err != nil {
		return nil, fmt.Errorf("generating the job secret: %v", err)
	}
	id, err := launch.NewJobID()
	if err != nil {
		return nil, fmt.Errorf("generating the job id: %v", err)
	}
	port, err := launch.FreePort(addr)
	if err != nil {
		return nil, fmt.Errorf("finding a rendezvous port: %v", err)
	}
	return &job{
		size:       size,
		argv:       argv,
		addr:       addr,
		rendezvous: net.JoinHostPort(addr, strconv.Itoa(port)),
		secret:     secret,
		extraEnv:   append(append([]string{launch.EnvJobID + "=" + id}, launch.CoreShare(size)...), launch.SpinShare(size)...),
		exited:     make([]bool, size),
	}, nil
}

// result is the outcome of one rank.
type result struct {
	rank  int
	state *os.ProcessState // nil if the rank could not be started
	err   error
}

// run starts the ranks, supervises them until all have ended and returns
// rmarun's exit status.
func (j *job) run() int {
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)

	done := make(chan result, j.size)
	running := 0
	for rank := range j.size {
		cmd := exec.Command(j.argv[0], j.argv[1:]...)
		cmd.Env = slices.Concat(os.Environ(), j.extraEnv,
			launch.Env(rank, j.size, j.rendezvous, j.secret, j.addr))
		prefix := ""
		if !j.quiet {
			prefix = "[" + strconv.Itoa(rank) + "] "
		}
		stdout := &lineWriter{w: os.Stdout, mu: &j.outMu, prefix: []byte(prefix)}
		stderr := &lineWriter{w: os.Stderr, mu: &j.outMu, prefix: []byte(prefix)}
		cmd.Stdout, cmd.Stderr = stdout, stderr
		cmd.SysProcAttr = sysProcAttr()
		cmd.WaitDelay = gracePeriod // for pipes held open by grandchildren
		running++
		if err := cmd.Start(); err != nil {
			done <- result{rank, nil, err}
			break
		}
		j.cmds = append(j.cmds, cmd)
		go func() {
			err := cmd.Wait()
			stdout.flush()
			stderr.flush()
			done <- result{rank, cmd.ProcessState, err}
		}()
	}

	var timeoutC, killC <-chan time.Time
	if j.timeout > 0 {
		t := time.NewTimer(j.timeout)
		defer t.Stop()
		timeoutC = t.C
	}
	code := 0
	// stop records the job's exit status and reports why it is stopping,
	// unless it is already stopping.
	stop := func(status int, sig syscall.Signal, format string, args ...any) {
		if code != 0 {
			return
		}
		code = status
		j.outMu.Lock()
		fmt.Fprintf(os.Stderr, "rmarun: "+format+"; stopping the job\n", args...)
		j.outMu.Unlock()
		j.signal(sig)
		killC = time.After(gracePeriod)
	}
	for running > 0 {
		select {
		case r := <-done:
			running--
			j.exited[r.rank] = true
			if status, what := describe(r); status != 0 {
				stop(status, syscall.SIGTERM, "rank %d %s", r.rank, what)
			}
		case sig := <-sigc:
			if code != 0 {
				j.signal(syscall.SIGKILL)
				continue
			}
			s := sig.(syscall.Signal)
			stop(128+int(s), s, "received %v", s)
		case <-timeoutC:
			stop(exitTimeout, syscall.SIGTERM, "job timed out after %v", j.timeout)
		case <-killC:
			j.signal(syscall.SIGKILL)
		}
	}
	return code
}

// signal sends sig to the process group of every rank still running.
func (j *job) signal(sig syscall.Signal) {
	for rank, cmd := range j.cmds {
		if !j.exited[rank] {
			syscall.Kill(-cmd.Process.Pid, sig)
		}
	}
}

// describe returns the exit status rmarun should use for a rank's result
// (0 if the rank succeeded) and a description of the failure.
func describe(r result) (int, string) {
	if r.state == nil {
		return 1, fmt.Sprintf("could not be started: %v", r.err)
	}
	if ws, ok := r.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 1, fmt.Sprintf("was killed by signal %d (%v)", int(ws.Signal()), ws.Signal())
	}
	status := r.state.ExitCode()
	switch {
	case status == 0:
		return 0, ""
	case status >= 1 && status <= 125:
		return status, fmt.Sprintf("exited with status %d", status)
	default:
		return 1, fmt.Sprintf("exited with status %d", status)
	}
}

// A lineWriter copies whole lines to w, each preceded by prefix, holding back
// a trailing partial line until it is completed or flushed. Each call writes
// its lines to w with a single Write while holding mu, so lines from several
// lineWriters sharing mu never mix. Write and flush must not be called
// concurrently on one lineWriter (os/exec calls Write from one goroutine).
type lineWriter struct {
	w       io.Writer
	mu      *sync.Mutex
	prefix  []byte
	pending []byte
}

// Write writes the complete lines of pending+p and keeps the rest pending.
func (lw *lineWriter) Write(p []byte) (int, error) {
	lw.pending = append(lw.pending, p...)
	end := bytes.LastIndexByte(lw.pending, '\n') + 1
	if end == 0 && len(lw.pending) < maxPending {
		return len(p), nil
	}
	if end == 0 { // an overlong partial line: write it as a line of its own
		end = len(lw.pending)
	}
	err := lw.emit(lw.pending[:end])
	lw.pending = append(lw.pending[:0], lw.pending[end:]...)
	return len(p), err
}

// flush writes a pending partial line, terminated by a newline.
func (lw *lineWriter) flush() {
	if len(lw.pending) > 0 {
		lw.emit(lw.pending)
		lw.pending = lw.pending[:0]
	}
}

// emit writes the lines in b, each prefixed and newline-terminated.
func (lw *lineWriter) emit(b []byte) error {
	var out []byte
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line = b[:i+1]
		}
		b = b[len(line):]
		out = append(out, lw.prefix...)
		out = append(out, line...)
		if line[len(line)-1] != '\n' {
			out = append(out, '\n')
		}
	}
	lw.mu.Lock()
	defer lw.mu.Unlock()
	_, err := lw.w.Write(out)
	return err
}
