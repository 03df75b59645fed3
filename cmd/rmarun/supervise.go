//go:build unix

package main

import (
	"fmt"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// exitTimeout is rmarun's exit status after -timeout expires.
const exitTimeout = 124

// A failure is a reason for the job to stop.
type failure struct {
	when   int64 // wall-clock time it happened, Unix nanoseconds
	status int   // rmarun's exit status for it
	msg    string
	rank   int // the failed rank, or -1
}

// supervisor is the state of a running job, owned by job.run's loop.
type supervisor struct {
	*job
	started    bool
	ended      int   // ranks reported ended
	endedHosts int   // remote launcher processes ended
	hellos     int   // remote agents that said hello
	init       []int // per rank: initNone, initStart or initJoined
	done       []bool
	joined     int
	anyInit    bool  // some rank entered rma.Init: the program is an rmago job
	quietExits []int // ranks that exited 0 without entering rma.Init, before anyInit
	exits      []exitInfo
	lost       [][]int // per rank: the peers it reported lost

	stopping bool
	external *failure  // the stop came from outside the ranks (signal, timeout, start-up bound)
	failures []failure // rank and host failures not caused by the stop

	rank0Port int // the rendezvous port rank 0's agent found

	startupC, timeoutC, killC, hardKillC <-chan time.Time
	startupTimer                         *time.Timer
}

// run starts the job, supervises it until every rank and host has ended,
// and returns rmarun's exit status.
func (j *job) run() int {
	sigc := make(chan os.Signal, 2)
	signal.Notify(sigc, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigc)
	j.events = make(chan event, 3*j.size+2*len(j.remotes)+16)
	s := &supervisor{job: j, init: make([]int, j.size), done: make([]bool, j.size), exits: make([]exitInfo, j.size), lost: make([][]int, j.size)}

	if j.opt.timeout > 0 {
		t := time.NewTimer(j.opt.timeout)
		defer t.Stop()
		s.timeoutC = t.C
	}
	if len(j.remotes) > 0 {
		s.armStartup()
		if err := j.startRemotes(); err != nil {
			for _, r := range j.remotes {
				if r.cmd == nil || r.cmd.Process == nil {
					r.ended = true
					s.endedHosts++
				}
			}
			s.fail(failure{now(), 1, err.Error(), -1})
		}
	}
	s.maybeStart()

	for !s.finished() {
		select {
		case ev := <-j.events:
			s.handle(ev)
		case sig := <-sigc:
			if s.stopping {
				s.kill()
				continue
			}
			sg := sig.(syscall.Signal)
			s.stop(failure{now(), 128 + int(sg), fmt.Sprintf("received %v", sg), -1}, true, sg)
		case <-s.timeoutC:
			s.stop(failure{now(), exitTimeout, fmt.Sprintf("job timed out after %v", j.opt.timeout), -1}, true, syscall.SIGTERM)
		case <-s.startupC:
			s.stop(failure{now(), 1, s.startupProblem(), -1}, true, syscall.SIGTERM)
		case <-s.killC:
			s.kill()
		case <-s.hardKillC:
			for _, r := range j.remotes {
				if !r.ended {
					r.kill()
				}
			}
		}
	}
	for _, r := range j.remotes {
		r.close()
	}
	if s.startupTimer != nil {
		s.startupTimer.Stop()
	}

	f := s.external
	if f == nil && len(s.failures) > 0 {
		first := s.firstFailure()
		f = &first
	}
	if f == nil {
		return 0
	}
	if s.ended > 0 || s.started {
		j.say("%s; the job was stopped", f.msg)
	} else {
		j.say("%s", f.msg)
	}
	return f.status
}

// firstFailure picks the failure to report: of the failures not known to
// follow from another (a rank that lost a peer which failed too), the
// earliest. The ranks' own reports make the choice exact across hosts;
// the times, taken by each host's exitClock, decide the rest.
func (s *supervisor) firstFailure() failure {
	failed := make(map[int]bool)
	for _, f := range s.failures {
		if f.rank >= 0 {
			failed[f.rank] = true
		}
	}
	var causes []failure
	for _, f := range s.failures {
		if f.rank < 0 || !slices.ContainsFunc(s.lost[f.rank], func(peer int) bool { return failed[peer] }) {
			causes = append(causes, f)
		}
	}
	if len(causes) == 0 { // each lost another: go by time
		causes = s.failures
	}
	return slices.MinFunc(causes, func(a, b failure) int { return cmpInt64(a.when, b.when) })
}

// finished reports whether every started rank and every remote host has
// ended.
func (s *supervisor) finished() bool {
	if s.endedHosts < len(s.remotes) {
		return false
	}
	if s.started {
		return s.ended == s.size
	}
	return s.stopping
}

// maybeStart starts the ranks once every remote agent has said hello.
func (s *supervisor) maybeStart() {
	if s.started || s.stopping || s.hellos < len(s.remotes) {
		return
	}
	if s.rank0 != nil {
		s.rendezvous = net.JoinHostPort(s.rank0.addr, strconv.Itoa(s.rank0Port))
	}
	s.started = true
	s.stopStartup() // it restarts when the first rank enters rma.Init
	s.startRanks()
}

// handle updates the job with an event.
func (s *supervisor) handle(ev event) {
	switch ev.kind {
	case evHello:
		r := s.remotes[ev.host]
		if r.hello {
			return
		}
		r.hello, r.addr = true, ev.addr
		if r == s.rank0 {
			s.rank0Port = ev.port
		}
		s.hellos++
		s.maybeStart()
	case evInit:
		if s.init[ev.rank] == initNone {
			s.init[ev.rank] = initStart
		}
		if !s.anyInit {
			s.anyInit = true
			s.armStartup()
			for _, r := range s.quietExits {
				s.rankFailed(r, s.exits[r])
			}
			s.quietExits = nil
		}
	case evJoined:
		if s.init[ev.rank] != initJoined {
			s.init[ev.rank] = initJoined
			s.joined++
			if s.joined == s.size {
				s.stopStartup()
			}
		}
	case evLost:
		if ev.peer >= 0 && ev.peer < s.size && !slices.Contains(s.lost[ev.rank], ev.peer) {
			s.lost[ev.rank] = append(s.lost[ev.rank], ev.peer)
		}
	case evExit:
		s.rankEnded(ev.rank, ev.exit)
	case evHostEnd:
		r := s.remotes[ev.host]
		r.ended = true
		r.close()
		s.endedHosts++
		if !r.hello {
			if !s.stopping {
				s.fail(failure{now(), 1, fmt.Sprintf("host %s: the rmarun agent did not start (%s)", r.name, ev.text), -1})
			}
			return
		}
		if !s.started {
			return
		}
		for _, rank := range r.ranks {
			if !s.done[rank] {
				s.rankEnded(rank, exitInfo{When: now(), Code: -1, Stopped: s.stopping,
					Lost: fmt.Sprintf("host %s was lost (launcher: %s)", r.name, ev.text)})
			}
		}
	}
}

// rankEnded records the end of a rank and stops the job if it failed.
func (s *supervisor) rankEnded(rank int, e exitInfo) {
	if s.done[rank] {
		return
	}
	s.done[rank] = true
	s.ended++
	if e.Init > s.init[rank] {
		s.init[rank] = e.Init
	}
	e.Init = s.init[rank]
	s.exits[rank] = e
	switch {
	case e.failed():
	case e.Init == initJoined:
		return // a rank that is done
	case s.anyInit:
	default: // maybe not an rmago program: judged if another rank enters rma.Init
		if !e.Stopped {
			s.quietExits = append(s.quietExits, rank)
		}
		return
	}
	if !e.Stopped {
		s.rankFailed(rank, e)
	}
}

// rankFailed records a rank's failure and stops the job.
func (s *supervisor) rankFailed(rank int, e exitInfo) {
	status, what := describe(e)
	where := ""
	if h := s.hostOf[rank]; h != "" && !isLocalRank(s.job, rank) {
		where = " on host " + h
	}
	s.fail(failure{e.When, status, fmt.Sprintf("rank %d %s%s", rank, what, where), rank})
}

// fail records a failure of a rank or host and stops the job. Of all the
// failures not caused by the stop, the earliest is reported.
func (s *supervisor) fail(f failure) {
	s.failures = append(s.failures, f)
	s.stop(f, false, syscall.SIGTERM)
}

// isLocalRank reports whether rank runs on rmarun's host.
func isLocalRank(j *job, rank int) bool {
	_, ok := slices.BinarySearch(j.localRanks, rank)
	return ok
}

// stop begins stopping the job, once: it sends sig to every rank (through
// the agents for remote ones) and arms the SIGKILL that follows the grace
// period. An external failure (signal, timeout, start-up bound) is what
// rmarun reports; a rank's failure is weighed against the others at the end.
func (s *supervisor) stop(f failure, external bool, sig syscall.Signal) {
	if s.stopping {
		return
	}
	if external {
		s.external = &f
	}
	s.stopping = true
	s.stopStartup()
	if s.local != nil {
		s.local.signal(sig)
	}
	if !s.started { // only agents to end: close their input, then kill
		for _, r := range s.remotes {
			r.close()
		}
		s.hardKillC = time.After(gracePeriod)
		return
	}
	for _, r := range s.remotes {
		r.signal(sig)
	}
	s.killC = time.After(gracePeriod)
}

// kill sends SIGKILL to every rank, has the agents end, and arms the last
// resort: killing the launcher processes.
func (s *supervisor) kill() {
	s.killC = nil
	if s.local != nil {
		s.local.signal(syscall.SIGKILL)
	}
	for _, r := range s.remotes {
		r.signal(syscall.SIGKILL)
		r.close()
	}
	if s.hardKillC == nil {
		s.hardKillC = time.After(gracePeriod)
	}
}

// armStartup starts the start-up bound.
func (s *supervisor) armStartup() {
	if s.opt.startup <= 0 || s.stopping {
		return
	}
	s.stopStartup()
	s.startupTimer = time.NewTimer(s.opt.startup)
	s.startupC = s.startupTimer.C
}

// stopStartup disarms the start-up bound.
func (s *supervisor) stopStartup() {
	if s.startupTimer != nil {
		s.startupTimer.Stop()
	}
	s.startupTimer, s.startupC = nil, nil
}

// startupProblem says who is late when the start-up bound expires.
func (s *supervisor) startupProblem() string {
	d := s.opt.startup
	if !s.started {
		var late []string
		for _, r := range s.remotes {
			if !r.hello {
				late = append(late, r.name)
			}
		}
		return fmt.Sprintf("host %s: the rmarun agent did not start within %v (-startup-timeout)", strings.Join(late, ", "), d)
	}
	var never, waiting []int
	for rank, st := range s.init {
		switch {
		case s.done[rank]:
		case st == initNone:
			never = append(never, rank)
		case st == initStart:
			waiting = append(waiting, rank)
		}
	}
	if len(never) > 0 {
		return fmt.Sprintf("%s not call rma.Init within %v of the first rank (-startup-timeout)", ranksDid(never), d)
	}
	return fmt.Sprintf("%s not join the job within %v of the first rank (-startup-timeout)", ranksDid(waiting), d)
}

// ranksDid is "rank 3 did" or "ranks 1, 3 did".
func ranksDid(ranks []int) string {
	s := make([]string, len(ranks))
	for i, r := range ranks {
		s[i] = strconv.Itoa(r)
	}
	if len(ranks) == 1 {
		return "rank " + s[0] + " did"
	}
	return "ranks " + strings.Join(s, ", ") + " did"
}

// describe returns the exit status rmarun uses for a failed rank and what
// happened to it.
func describe(e exitInfo) (int, string) {
	switch {
	case e.StartErr != "":
		return 1, "could not be started: " + e.StartErr
	case e.Lost != "":
		return 1, "was lost: " + e.Lost
	case e.Signal != 0:
		return 1, fmt.Sprintf("was killed by signal %d (%v)", e.Signal, syscall.Signal(e.Signal))
	case e.Code == 0 && e.Init == initStart:
		return 1, "exited with status 0 in rma.Init, before every rank joined"
	case e.Code == 0:
		return 1, "exited with status 0 without calling rma.Init, which the other ranks called"
	case e.Code >= 1 && e.Code <= 125:
		return e.Code, fmt.Sprintf("exited with status %d", e.Code)
	}
	return 1, fmt.Sprintf("exited with status %d", e.Code)
}

func now() int64 { return time.Now().UnixNano() }

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
