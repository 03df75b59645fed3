package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"time"

	"github.com/rmago/rmago/ci/faults"
)

// tailMax is how much of a rank's other output is kept for the report
// (enough for the goroutine dump of a hung rank).
const tailMax = 256 << 10

// proc is one rank process of a trial.
type proc struct {
	rank  int
	cmd   *exec.Cmd
	pid   int
	stdin io.WriteCloser // closed to release a holding rank
	done  chan struct{}  // closed once the process has been waited for

	mu     sync.Mutex
	events []faults.Event
	tail   []byte // the last tailMax bytes of its other output
	state  *os.ProcessState
	exitAt time.Time
	killed bool // the driver killed it because it hung
}

// startRank starts rank of a job with the given environment (appended to
// the driver's) and argv; extra are its descriptors from 3 on. notify gets
// a value (without blocking) whenever the process reports an event or
// exits.
func startRank(rank int, argv, env []string, extra []*os.File, notify chan<- struct{}) (*proc, error) {
	p := &proc{rank: rank, done: make(chan struct{})}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.ExtraFiles = extra
	cmd.Stdout = &lineSink{p: p, notify: notify}
	cmd.Stderr = &lineSink{p: p, notify: notify}
	// Its own process group (the driver kills the group), and killed by
	// the kernel if the driver dies: the runner leaves nothing behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second // output pipes held open by a descendant
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.cmd, p.pid = cmd, cmd.Process.Pid
	live.Store(p, struct{}{})
	go func() {
		cmd.Wait()
		p.mu.Lock()
		p.state, p.exitAt = cmd.ProcessState, time.Now()
		p.mu.Unlock()
		live.Delete(p)
		close(p.done)
		poke(notify)
	}()
	return p, nil
}

// live holds the rank processes not yet waited for, of every trial.
var live sync.Map

// killAll kills every rank process still running (on an interrupt).
func killAll() {
	live.Range(func(k, _ any) bool {
		p := k.(*proc)
		syscall.Kill(-p.pid, syscall.SIGKILL)
		syscall.Kill(p.pid, syscall.SIGKILL)
		return true
	})
}

// poke wakes the trial's loop without blocking.
func poke(c chan<- struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// exited reports whether the process has ended and been waited for.
func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// ack writes the byte a faulty rank run with -ack waits for at its fault
// point.
func (p *proc) ack() { p.stdin.Write([]byte{1}) }

// release closes the process's standard input: a rank holding after its
// error goes on to Close.
func (p *proc) release() { p.stdin.Close() }

// signal sends sig to the process (not its group) if it is still running.
func (p *proc) signal(sig syscall.Signal) {
	if !p.exited() {
		syscall.Kill(p.pid, sig)
	}
}

// dumpAndKill has a hung rank print its goroutines (SIGQUIT: the Go
// runtime dumps every goroutine's stack to stderr and exits), waits a
// little for it, then kills it.
func (p *proc) dumpAndKill() {
	p.signal(syscall.SIGCONT)
	p.signal(syscall.SIGQUIT)
	select {
	case <-p.done:
	case <-time.After(2 * time.Second):
	}
	p.kill()
}

// kill kills the process's group and waits (boundedly) for it to be reaped.
func (p *proc) kill() {
	if !p.exited() {
		syscall.Kill(-p.pid, syscall.SIGKILL)
		syscall.Kill(p.pid, syscall.SIGKILL)
	}
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	}
}

// event returns the first event of the given kind, if any.
func (p *proc) event(kind string) (faults.Event, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, e := range p.events {
		if e.Kind == kind {
			return e, true
		}
	}
	return faults.Event{}, false
}

// exit describes how the process ended ("" while it runs).
func (p *proc) exit() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return ""
	}
	if ws, ok := p.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("killed by %v", ws.Signal())
	}
	return fmt.Sprintf("exit %d", p.state.ExitCode())
}

// output returns the kept tail of the rank's other output.
func (p *proc) output() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return string(p.tail)
}

// lineSink receives a rank's output: FAULTRANK lines become events, other
// lines go to the kept tail.
type lineSink struct {
	p       *proc
	notify  chan<- struct{}
	pending []byte
}

func (s *lineSink) Write(b []byte) (int, error) {
	s.pending = append(s.pending, b...)
	for {
		i := bytes.IndexByte(s.pending, '\n')
		if i < 0 {
			if len(s.pending) > tailMax { // an endless line: keep its end
				s.pending = append(s.pending[:0], s.pending[len(s.pending)-tailMax:]...)
			}
			return len(b), nil
		}
		s.line(s.pending[:i])
		s.pending = s.pending[i+1:]
	}
}

func (s *lineSink) line(l []byte) {
	p := s.p
	e, ok := faults.ParseLine(l)
	p.mu.Lock()
	if ok {
		p.events = append(p.events, e)
	} else {
		p.tail = append(p.tail, l...)
		p.tail = append(p.tail, '\n')
		if len(p.tail) > tailMax {
			p.tail = append(p.tail[:0], p.tail[len(p.tail)-tailMax:]...)
		}
	}
	p.mu.Unlock()
	if ok {
		poke(s.notify)
	}
}
