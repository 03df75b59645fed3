//go:build unix

package main

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rmago/rmago/internal/launch"
)

// gracePeriod is the time between SIGTERM and SIGKILL when a job stops, and
// the time a rank's output may stay open after it exited (held by a process
// it started).
const gracePeriod = 2 * time.Second

// How far a rank got through start-up, as it reported on its notify pipe.
const (
	initNone   = 0 // not yet in rma.Init
	initStart  = 1 // in rma.Init
	initJoined = 2 // met every other rank
)

// The kinds of event the ranks and hosts of a job report to its supervisor.
type evKind int

const (
	evInit    evKind = iota // a rank entered rma.Init
	evJoined                // a rank met every other rank
	evExit                  // a rank ended (exit)
	evHello                 // a remote host's agent is up (addr, port)
	evHostEnd               // a remote host's launcher process ended (text)
	evLost                  // a rank lost a peer (peer): its own failure follows from the peer's
)

// An event is something that happened to a rank or a host.
type event struct {
	kind evKind
	rank int
	host int // index of the remote host, for evHello and evHostEnd
	exit exitInfo
	peer int
	addr string
	port int
	text string
}

// exitInfo is how a rank ended.
type exitInfo struct {
	When     int64  // wall-clock time of the exit, Unix nanoseconds, on the rank's host
	Code     int    // exit status; -1 if killed by a signal, not started or lost
	Signal   int    // the killing signal, or 0
	Stopped  bool   // it ended after rmarun began stopping its host's ranks
	Init     int    // initNone, initStart or initJoined
	StartErr string // why it could not be started, or "" if it was
	Lost     string // why its end was not seen (its host was lost), or ""
}

// failed reports whether the rank's end is a failure by itself, whatever the
// other ranks did. An exit with status 0 before joining is judged by the
// supervisor, which knows whether the program uses rma.Init at all.
func (e exitInfo) failed() bool {
	return e.StartErr != "" || e.Lost != "" || e.Code != 0 || e.Signal != 0
}

// A group is the ranks of a job that run on one host: all of them for a
// single-host job, otherwise those of rmarun's own host or of the host of
// an agent. It starts them, copies their output, watches their start-up and
// reports how they end.
type group struct {
	argv    []string
	env     []string                               // environment shared by the ranks
	rankEnv func(rank int) []string                // and each rank's own
	output  func(rank int) (out, errw *lineWriter) // where its output goes
	events  chan<- event
	rdvFile *os.File // rank 0's rendezvous listener, if rank 0 is in this group (closed once started)

	bindTo        string // -bind-to policy: bindNone, bindCore, bindHWThread ("" is none)
	oversubscribe bool   // more ranks than units may share them

	clock    exitClock
	mu       sync.Mutex
	procs    []*rankProc
	stopping bool
	stopAt   int64 // when the first signal was sent, Unix nanoseconds
}

// rankProc is a started rank.
type rankProc struct {
	rank  int
	pid   int
	ended bool         // reaped (under group.mu)
	init  atomic.Int32 // initNone, initStart or initJoined
	lost  []byte       // digits of a lost peer's rank being read, or nil
}

// start starts the ranks in order. If one cannot be started, it and the
// ranks after it are reported as ended (the later ones as stopped) and
// the ranks already started go on until the supervisor stops them.
// A binding that cannot be made (-bind-to) is the first rank's failure,
// before any starts.
func (g *group) start(ranks []int) {
	bind, err := bindRanks(g.bindTo, len(ranks), g.oversubscribe)
	for i, rank := range ranks {
		if err == nil {
			var set *cpuSet
			var env []string
			if bind != nil {
				set = &bind.sets[i]
				env = []string{launch.EnvBound + "=" + strconv.Itoa(bind.sharing[i])}
			}
			if err = g.startRank(rank, set, env); err == nil {
				continue
			}
		}
		now := time.Now().UnixNano()
		g.events <- event{kind: evExit, rank: rank, exit: exitInfo{When: now, Code: -1, StartErr: err.Error()}}
		for _, r := range ranks[i+1:] {
			g.events <- event{kind: evExit, rank: r, exit: exitInfo{When: now, Code: -1, Stopped: true, StartErr: "not started"}}
		}
		return
	}
}

// startRank starts one rank, bound to set if it is not nil, with env added
// to its environment: its standard output and error are pipes of
// rmarun's, and so is its notify pipe (launch.EnvNotifyFD), on which
// rma.Init reports and whose end marks the rank's death (see exitClock);
// standard input is /dev/null.
func (g *group) startRank(rank int, set *cpuSet, env []string) error {
	var files []*os.File // the rank's ends, closed here once it has them
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	outR, outW, err := os.Pipe()
	if err != nil {
		return err
	}
	files = append(files, outW)
	errR, errW, err := os.Pipe()
	if err != nil {
		outR.Close()
		return err
	}
	files = append(files, errW)
	p := &rankProc{rank: rank}
	ntfW, ended, err := g.clock.pipe(func(b byte) { g.notified(p, b) })
	if err != nil {
		outR.Close()
		errR.Close()
		return err
	}
	files = append(files, ntfW)
	cmd := exec.Command(g.argv[0], g.argv[1:]...)
	fd := notifyFD()
	cmd.Env = slices.Concat(g.env, g.rankEnv(rank), env, []string{launch.EnvNotifyFD + "=" + strconv.Itoa(fd)})
	cmd.Stdout, cmd.Stderr = outW, errW
	cmd.ExtraFiles = make([]*os.File, fd-3+1) // nil entries are closed in the rank
	cmd.ExtraFiles[fd-3] = ntfW
	if rank == 0 && g.rdvFile != nil && fd > 3 {
		// Rank 0 inherits the rendezvous listener, just below the notify pipe.
		cmd.ExtraFiles[fd-4] = g.rdvFile
		cmd.Env = append(cmd.Env, launch.EnvRendezvousFD+"="+strconv.Itoa(fd-1))
		files = append(files, g.rdvFile)
	}
	cmd.SysProcAttr = sysProcAttr()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopping {
		err = errStopping
	} else if err = startOn(set, cmd.Start); err == nil {
		p.pid = cmd.Process.Pid
		g.procs = append(g.procs, p)
		go g.watch(p, cmd.Process, ended, outR, errR)
		return nil
	}
	outR.Close()
	errR.Close()
	return err
}

// notifyFD is the descriptor number of a rank's notify pipe: high, so that
// the rank's own files are below it and a dying rank closes it first, but
// within rmarun's limit on open files.
func notifyFD() int {
	fd := 1000
	var lim syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim) == nil && lim.Cur < uint64(fd+1) {
		fd = max(int(lim.Cur)-1, 3)
	}
	return fd
}

// notified records a byte a rank wrote on its notify pipe. The bytes of one
// pipe come from one goroutine.
func (g *group) notified(p *rankProc, b byte) {
	switch {
	case p.lost != nil && b == '\n':
		if peer, err := strconv.Atoi(string(p.lost[1:])); err == nil {
			g.events <- event{kind: evLost, rank: p.rank, peer: peer}
		}
		p.lost = nil
	case p.lost != nil:
		if len(p.lost) < 12 {
			p.lost = append(p.lost, b)
		}
	case b == launch.NotifyLostByte:
		p.lost = []byte{b}
	case b == launch.NotifyStartByte && p.init.Load() == initNone:
		p.init.Store(initStart)
		g.events <- event{kind: evInit, rank: p.rank}
	case b == launch.NotifyJoinedByte && p.init.Load() != initJoined:
		p.init.Store(initJoined)
		g.events <- event{kind: evJoined, rank: p.rank}
	}
}

// errStopping is the start error of ranks that the job stopped before they
// started.
var errStopping = stoppingError{}

type stoppingError struct{}

func (stoppingError) Error() string { return "not started: the job is stopping" }

// watch copies a rank's output until it ends, then reports its end. The
// time of the end is the one the exitClock took when the rank's notify
// pipe ended, which orders the deaths of the ranks of a host as the kernel
// saw them; if a process the rank started holds the pipe, it is the time
// the rank was reaped.
func (g *group) watch(p *rankProc, proc *os.Process, ended <-chan pipeEnd, outR, errR *os.File) {
	stdout, stderr := g.output(p.rank)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); pump(outR, stdout) }()
	go func() { defer wg.Done(); pump(errR, stderr) }()

	state, err := proc.Wait()
	info := exitInfo{When: time.Now().UnixNano(), Code: -1}
	g.mu.Lock()
	p.ended = true
	g.mu.Unlock()
	if err != nil {
		info.Lost = err.Error()
	} else if ws, ok := state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		info.Signal = int(ws.Signal())
	} else {
		info.Code = state.ExitCode()
	}
	// The end of the notify pipe and of the output normally come at once;
	// a process the rank started may hold them open, for a grace period.
	drained := make(chan struct{})
	go func() { wg.Wait(); close(drained) }()
	grace := time.NewTimer(gracePeriod)
	defer grace.Stop()
	var end pipeEnd
	for ended != nil || drained != nil {
		select {
		case end = <-ended:
			info.When = end.when
			ended = nil
		case <-drained:
			drained = nil
		case <-grace.C:
			outR.Close()
			errR.Close()
			if drained != nil {
				<-drained
			}
			ended, drained = nil, nil
		}
	}
	outR.Close()
	errR.Close()
	if end.known {
		info.Stopped = end.stopped
	} else {
		g.mu.Lock()
		info.Stopped = g.stopping && info.When >= g.stopAt
		g.mu.Unlock()
	}
	info.Init = int(p.init.Load())
	g.events <- event{kind: evExit, rank: p.rank, exit: info}
}

// signal sends sig to the process group of every rank still running, and
// marks the group as stopping: ranks that end from now on were stopped,
// those that ended before failed by themselves, even if rmarun learns of
// it later.
func (g *group) signal(sig syscall.Signal) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.stopping {
		g.clock.markStop()
		g.stopping, g.stopAt = true, time.Now().UnixNano()
	}
	for _, p := range g.procs {
		if !p.ended {
			syscall.Kill(-p.pid, sig)
		}
	}
}

// rankPrefix is the "[rank] " put before each line of a rank's output.
func rankPrefix(rank int) []byte {
	return []byte("[" + strconv.Itoa(rank) + "] ")
}
