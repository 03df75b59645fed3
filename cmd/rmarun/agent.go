//go:build unix

package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rmago/rmago/internal/launch"
)

// runAgent is "rmarun -agent": the part of a job on one remote host,
// started there by the launcher (ssh). It reads its orders on standard
// input and writes the agent protocol (protocol.go) on standard output. It
// starts its host's ranks, relays their output and start-up, and reports how
// each ends. When its input closes (rmarun or the ssh connection is gone)
// or it gets SIGHUP, SIGINT or SIGTERM, it stops its ranks: SIGTERM, then
// SIGKILL after the grace period. On Linux its ranks are also killed if
// the agent dies.
func runAgent() int {
	signal.Ignore(syscall.SIGPIPE) // a closed output is seen as write errors
	var outMu sync.Mutex
	say := func(format string, args ...any) {
		outMu.Lock()
		defer outMu.Unlock()
		fmt.Fprintf(os.Stdout, format, args...)
	}
	in := bufio.NewReaderSize(os.Stdin, 64<<10)

	var setup setupMsg
	if err := readJSON(in, &setup); err != nil {
		if err != io.EOF {
			say("L reading the setup: %s\n", oneLine(err.Error()))
		}
		return 1
	}
	addr, err := setup.Choice.pick()
	if err != nil {
		say("L choosing the address of host %s: %s\n", setup.Host, oneLine(err.Error()))
		return 1
	}
	port := 0
	var rdv *os.File // rank 0's listener: rank 0 runs on this host
	if setup.NeedPort {
		if rdv, port, err = rendezvousListener(addr); err != nil {
			say("L opening a rendezvous port on %s: %s\n", addr, oneLine(err.Error()))
			return 1
		}
	}
	say("H %s %d\n", addr, port)

	var start startMsg
	if err := readJSON(in, &start); err != nil {
		if err != io.EOF {
			say("L reading the start order: %s\n", oneLine(err.Error()))
		}
		return 1
	}
	for _, kv := range start.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			os.Setenv(k, v)
		}
	}
	if start.Cwd != "" {
		if err := os.Chdir(start.Cwd); err != nil {
			say("L %s: staying in the login directory\n", oneLine(err.Error()))
		}
	}
	n := len(start.Ranks)
	events := make(chan event, 3*n+8)
	g := &group{
		argv: start.Argv,
		env:  os.Environ(),
		rankEnv: func(rank int) []string {
			return launch.Env(rank, start.Size, start.Rendezvous, start.Secret, start.Addr)
		},
		output: func(rank int) (*lineWriter, *lineWriter) {
			r := strconv.Itoa(rank)
			return &lineWriter{w: os.Stdout, mu: &outMu, prefix: []byte("O " + r + " ")},
				&lineWriter{w: os.Stdout, mu: &outMu, prefix: []byte("E " + r + " ")}
		},
		events:        events,
		rdvFile:       rdv,
		bindTo:        start.BindTo,
		oversubscribe: start.Oversubscribe,
	}

	// Orders from rmarun, and the end of its input.
	orders := make(chan syscall.Signal)
	go func() {
		for {
			line, err := in.ReadString('\n')
			if err != nil {
				close(orders)
				return
			}
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "S "); ok {
				if s, err := strconv.Atoi(v); err == nil && s > 0 {
					orders <- syscall.Signal(s)
				}
			}
		}
	}()
	sigc := make(chan os.Signal, 4)
	signal.Notify(sigc, syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM)

	go g.start(start.Ranks)
	var killC <-chan time.Time
	stop := func() {
		if killC == nil {
			g.signal(syscall.SIGTERM)
			killC = time.After(gracePeriod)
		}
	}
	for ended := 0; ended < n; {
		select {
		case ev := <-events:
			switch ev.kind {
			case evInit:
				say("I %d\n", ev.rank)
			case evJoined:
				say("J %d\n", ev.rank)
			case evLost:
				say("P %d %d\n", ev.rank, ev.peer)
			case evExit:
				ended++
				say("%s", encodeExit(ev.rank, ev.exit))
			}
		case sig, ok := <-orders:
			if !ok {
				orders = nil
				stop()
				continue
			}
			g.signal(sig)
		case <-sigc:
			stop()
		case <-killC:
			g.signal(syscall.SIGKILL)
		}
	}
	return 0
}

// readJSON reads one line of JSON into v.
func readJSON(r *bufio.Reader, v any) error {
	line, err := r.ReadBytes('\n')
	if err != nil && (err != io.EOF || len(line) == 0) {
		return err
	}
	return json.Unmarshal(line, v)
}

// agentCommand is the shell command the launcher runs on a remote host:
// rmarun at path, in agent mode. ssh hands its command line to the remote
// user's shell, so every word is quoted for it.
func agentCommand(path string) string {
	return "exec " + shellQuote(path) + " -agent"
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("/._-+=:,@%", r))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
