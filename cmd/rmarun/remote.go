//go:build unix

package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// A remote is a host of the job that rmarun reaches through the launcher:
// the launcher process (ssh HOST 'exec rmarun -agent'), with the agent at
// its other end.
type remote struct {
	index int
	name  string
	ranks []int
	cmd   *exec.Cmd

	mu    sync.Mutex
	stdin io.WriteCloser // nil once closed
	ended bool           // the launcher process ended (supervisor's)
	hello bool           // the agent said hello (supervisor's)
	addr  string         // the address its ranks listen on
}

// launcherArgv returns the command that runs a shell command on a host,
// before the host and the command: ssh (or rsh), or --launcher-exec's
// command split into words.
func launcherArgv(launcher, execCmd string) []string {
	if execCmd != "" {
		return strings.Fields(execCmd)
	}
	if launcher == "rsh" {
		return []string{"rsh"}
	}
	return []string{"ssh", "-x"} // as Hydra: no X11 forwarding
}

// start runs the launcher for the host and sends the agent its setup. Its
// output is relayed by two goroutines: rank output to rmarun's standard
// output and error, protocol messages as events, and anything else (the
// launcher's own complaints) to rmarun's standard error under the host's
// name. When the launcher process ends, an evHostEnd event says so.
func (r *remote) start(argv []string, agentPath string, setup setupMsg, j *job) error {
	r.cmd = exec.Command(argv[0], slices.Concat(argv[1:], []string{r.name, agentCommand(agentPath)})...)
	r.cmd.SysProcAttr = sysProcAttr()
	stdin, err := r.cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := r.cmd.StdoutPipe()
	if err != nil {
		return err
	}
	stderr, err := r.cmd.StderrPipe()
	if err != nil {
		return err
	}
	if err := r.cmd.Start(); err != nil {
		return err
	}
	r.stdin = stdin
	b, _ := json.Marshal(setup)
	r.send(string(b) + "\n")

	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(stderr)
		sc.Buffer(nil, 1<<20)
		for sc.Scan() {
			j.say("host %s: %s", r.name, sc.Text())
		}
	}()
	go func() {
		r.relay(stdout, j)
		wg.Wait()
		err := r.cmd.Wait()
		text := "ended"
		if err != nil {
			text = err.Error()
		}
		j.events <- event{kind: evHostEnd, host: r.index, text: text}
	}()
	return nil
}

// relay reads the agent's messages until its output ends. Rank output is
// written in batches: the lines already read are written at once.
func (r *remote) relay(stdout io.Reader, j *job) {
	rd := bufio.NewReaderSize(stdout, 128<<10)
	var out, errs bytes.Buffer
	flush := func() {
		j.outMu.Lock()
		if out.Len() > 0 {
			os.Stdout.Write(out.Bytes())
		}
		if errs.Len() > 0 {
			os.Stderr.Write(errs.Bytes())
		}
		j.outMu.Unlock()
		out.Reset()
		errs.Reset()
	}
	for {
		line, err := rd.ReadString('\n')
		if line != "" {
			r.message(strings.TrimSuffix(line, "\n"), j, &out, &errs)
		}
		if err != nil {
			break
		}
		if rd.Buffered() == 0 || out.Len()+errs.Len() > 64<<10 {
			flush()
		}
	}
	flush()
}

// message handles one line from the agent.
func (r *remote) message(line string, j *job, out, errs *bytes.Buffer) {
	kind, rest, _ := strings.Cut(line, " ")
	switch kind {
	case "O", "E":
		rs, text, _ := strings.Cut(rest, " ")
		if rank, err := strconv.Atoi(rs); err == nil && r.owns(rank) {
			w := out
			if kind == "E" {
				w = errs
			}
			if !j.opt.quiet {
				w.WriteString("[" + rs + "] ")
			}
			w.WriteString(text)
			w.WriteByte('\n')
			return
		}
	case "I", "J":
		if rank, err := strconv.Atoi(rest); err == nil && r.owns(rank) {
			k := evInit
			if kind == "J" {
				k = evJoined
			}
			j.events <- event{kind: k, rank: rank}
			return
		}
	case "P":
		rs, ps, _ := strings.Cut(rest, " ")
		rank, err1 := strconv.Atoi(rs)
		peer, err2 := strconv.Atoi(ps)
		if err1 == nil && err2 == nil && r.owns(rank) {
			j.events <- event{kind: evLost, rank: rank, peer: peer}
			return
		}
	case "X":
		if rank, info, err := decodeExit(rest); err == nil && r.owns(rank) {
			j.events <- event{kind: evExit, rank: rank, host: r.index, exit: info}
			return
		}
	case "H":
		a, p, _ := strings.Cut(rest, " ")
		if port, err := strconv.Atoi(p); err == nil {
			j.events <- event{kind: evHello, host: r.index, addr: a, port: port}
			return
		}
	case "L":
		j.say("host %s: %s", r.name, rest)
		return
	}
	// Not from the agent: a login banner, or a shell's complaint.
	j.say("host %s: %s", r.name, line)
}

// owns reports whether rank runs on this host.
func (r *remote) owns(rank int) bool {
	for _, x := range r.ranks {
		if x == rank {
			return true
		}
	}
	return false
}

// send writes a line to the agent, unless its input is closed.
func (r *remote) send(line string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stdin != nil {
		io.WriteString(r.stdin, line)
	}
}

// signal has the agent send sig to its ranks.
func (r *remote) signal(sig syscall.Signal) {
	r.send(fmt.Sprintf("S %d\n", int(sig)))
}

// close closes the agent's input: it stops its ranks and exits.
func (r *remote) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stdin != nil {
		r.stdin.Close()
		r.stdin = nil
	}
}

// kill kills the launcher process and its process group: the last resort
// when the agent does not end.
func (r *remote) kill() {
	if r.cmd != nil && r.cmd.Process != nil {
		syscall.Kill(-r.cmd.Process.Pid, syscall.SIGKILL)
	}
}
