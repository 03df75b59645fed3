package main

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rmago/rmago/ci/faults"
	"github.com/rmago/rmago/internal/launch"
)

// spec is one planned trial.
type spec struct {
	scen   scenario
	index  int           // trial number within the scenario, from 0
	mode   faults.Mode   // the scenario's, or chosen for a bootstrap fault
	n      int           // ranks
	faulty int           // the faulty rank (-1: none, bootstrap faults)
	at     int           // the faulty rank's fault epoch
	jitter time.Duration // between the fault point and the driver's signal
}

func (sp spec) String() string {
	s := fmt.Sprintf("%s #%d n=%d", sp.scen, sp.index+1, sp.n)
	if sp.scen.fault.Bootstrap() {
		return s + " " + string(sp.mode)
	}
	return s + fmt.Sprintf(" faulty=%d at=%d", sp.faulty, sp.at)
}

// rankResult is what one rank of a trial came to.
type rankResult struct {
	rank     int
	survivor bool          // counted: every rank but the faulty one (all ranks if no rank is killed)
	right    bool          // the right error (or, without a killed rank, success) in time
	why      string        // why not: a short category
	detail   string        // and the message behind it
	class    faults.Class  // the class of its first error
	after    time.Duration // its first error's time after the fault
	hung     bool          // still running at its deadline: killed
	hangWhy  string        // then: at what stage
	hangSite string        // and where its main goroutine was
	corrupt  int64
	corrupt1 string // the first wrong word
	checked  int64
	race     bool
	raceSite string // the race report's first frames
}

// result is the outcome of a trial.
type result struct {
	spec    spec
	ranks   []rankResult
	orphans int
	setup   string // the trial went wrong before the fault could be made
	wall    time.Duration
	log     string   // details, for failed trials
	outputs []string // for -log: what the ranks that went wrong printed (goroutine dumps of hung ones)
}

func (r *result) survivors() (n, right, hangs int, corrupt int64) {
	for _, rr := range r.ranks {
		if rr.hung {
			hangs++
		}
		corrupt += rr.corrupt
		if rr.survivor {
			n++
			if rr.right {
				right++
			}
		}
	}
	return
}

// ok reports whether the trial passed.
func (r *result) ok() bool {
	n, right, hangs, corrupt := r.survivors()
	races := slices.ContainsFunc(r.ranks, func(rr rankResult) bool { return rr.race })
	return r.setup == "" && n == right && hangs == 0 && corrupt == 0 && r.orphans == 0 && !races
}

// trial runs one job with one fault and judges every rank.
type trial struct {
	s       *settings
	sp      spec
	marker  string
	procs   []*proc
	notify  chan struct{}
	faultAt time.Time // when the fault was made
	contAt  time.Time // when the faulty rank was continued (StopCont, Pause)
	setupAt time.Time // when the trial's end began (deadlines of a failed setup)
	setup   string
}

// runTrial runs one trial: it starts the job, makes the fault, runs the
// job to its end (boundedly), looks for orphans and judges every rank.
func runTrial(s *settings, sp spec) result {
	start := time.Now()
	t := &trial{s: s, sp: sp, notify: make(chan struct{}, 1)}
	var mk [8]byte
	rand.Read(mk[:])
	t.marker = hex.EncodeToString(mk[:])
	conns, err := t.launch()
	if err != nil {
		t.setup = "launch: " + err.Error()
	}
	if t.setup == "" {
		t.inject()
	}
	t.finish()
	closeAll(conns)
	r := result{spec: sp, setup: t.setup}
	// Every rank has been waited for: anything of the job still alive is
	// an orphan.
	r.orphans = reapOrphans(t.marker)
	for _, p := range t.procs {
		rr := t.judge(p)
		r.ranks = append(r.ranks, rr)
		if rr.hung || rr.race || !rr.right && rr.survivor {
			r.outputs = append(r.outputs, fmt.Sprintf("=== rank %d (%s)\n%s\n", p.rank, cmpOr(p.exit(), "running"), t.timeline(p)+"\n"+p.output()))
		}
	}
	r.wall = time.Since(start)
	r.log = t.describe(&r)
	return r
}

// args returns the faultrank command line of the trial.
func (t *trial) args() []string {
	sp, f := t.sp, t.sp.scen.fault
	words := t.s.words
	if f == faults.StopRead {
		words = t.s.stopReadWords
	}
	a := []string{t.s.rankBin, "-hold", "-mode", string(sp.mode), "-words", strconv.Itoa(words),
		"-maxtime", (t.s.startLimit(sp.n) + t.s.exitBound() + 10*time.Second).String()}
	switch {
	case f.KillsARank() && t.s.targetless(f, sp.mode):
		// The survivors' epochs go on past the stopped rank (its memory
		// stays reachable), so they run a few more and meet it, and the
		// error, in the final barrier.
		a = append(a, "-epochs", strconv.Itoa(sp.at+8))
	case f.KillsARank():
		// Run until the fault ends it.
		a = append(a, "-epochs", strconv.Itoa(sp.at+faults.MaxEpochs/2))
	case f == faults.Pause:
		a = append(a, "-epochs", strconv.Itoa(sp.at+8))
	default:
		a = append(a, "-epochs", "8")
	}
	if sp.faulty >= 0 {
		a = append(a, "-fault", string(f), "-faulty", strconv.Itoa(sp.faulty), "-at", strconv.Itoa(sp.at))
		if f.Signalled() {
			// The job waits at the fault point until the driver has seen
			// it: on a loaded machine the driver could otherwise read the
			// fault line only after the whole job had ended.
			a = append(a, "-ack")
		}
		if t.s.targetless(f, sp.mode) {
			a = append(a, "-selfstop") // a moment later it could have run every epoch
		}
	}
	if f == faults.StopRead {
		a = append(a, "-burst", strconv.Itoa(t.s.burst))
	}
	return a
}

// launch starts the ranks as rmarun would, but one by one and known by
// pid; for a bootstrap fault, rank 0 first, then the hostile connections,
// then the others.
func (t *trial) launch() ([]net.Conn, error) {
	sp := t.sp
	// Rank 0 inherits the rendezvous listener, as under rmarun: a port
	// found free and closed again could be taken by a connection of a
	// trial running in parallel before rank 0 listened on it.
	ln, port, err := launch.ListenFree(launch.DefaultAddr)
	if err != nil {
		return nil, err
	}
	rdv, err := ln.File()
	ln.Close()
	if err != nil {
		return nil, err
	}
	defer rdv.Close() // rank 0 has its own once started
	secret, err := launch.NewSecret()
	if err != nil {
		return nil, err
	}
	id, err := launch.NewJobID()
	if err != nil {
		return nil, err
	}
	rendezvous := net.JoinHostPort(launch.DefaultAddr, strconv.Itoa(port))
	common := slices.Concat([]string{
		launch.EnvJobID + "=" + id,
		launch.EnvProvider + "=" + t.s.provider,
		"RMAGO_TIMEOUT=" + t.s.timeout.String(),
		trialEnv + "=" + t.marker,
	})
	argv := t.args()
	var conns []net.Conn
	for r := range sp.n {
		env := slices.Concat(common, launch.Env(r, sp.n, rendezvous, secret, launch.DefaultAddr))
		if r == sp.faulty && sp.scen.fault == faults.StopRead {
			env = append(env, launch.SpinEnv+"=0") // nothing may poll its sockets
		}
		var extra []*os.File
		if r == 0 {
			extra = []*os.File{rdv} // descriptor 3
			env = append(env, launch.EnvRendezvousFD+"=3")
		}
		p, err := startRank(r, argv, env, extra, t.notify)
		if err != nil {
			return conns, err
		}
		t.procs = append(t.procs, p)
		if r == 0 && sp.scen.fault.Bootstrap() {
			if conns, err = attack(rendezvous, sp.scen.fault, 10*time.Second); err != nil {
				return conns, err
			}
		}
	}
	if sp.scen.fault.Bootstrap() {
		t.faultAt = time.Now()
	}
	return conns, nil
}

// wait waits until cond holds or the deadline passes; it reports cond.
func (t *trial) wait(deadline time.Time, cond func() bool) bool {
	for {
		if cond() {
			return true
		}
		d := time.Until(deadline)
		if d <= 0 {
			return false
		}
		timer := time.NewTimer(d)
		select {
		case <-t.notify:
		case <-timer.C:
		}
		timer.Stop()
	}
}

// faultLineGrace bounds how long inject waits for the faulty rank's fault
// line once another rank reported an error or ended.
const faultLineGrace = 2 * time.Second

// inject waits for the faulty rank's fault point and makes the fault.
func (t *trial) inject() {
	sp, f := t.sp, t.sp.scen.fault
	if f.Bootstrap() {
		return
	}
	d := t.procs[sp.faulty]
	var point faults.Event
	reached := t.wait(time.Now().Add(t.s.startLimit(sp.n)), func() bool {
		var ok bool
		if point, ok = d.event(faults.EvFault); ok {
			return true
		}
		// A rank that failed or ended before the fault makes the trial
		// moot.
		return slices.ContainsFunc(t.procs, func(p *proc) bool {
			_, erred := p.event(faults.EvError)
			return erred || p.exited()
		})
	})
	if reached && point.Kind == "" {
		// Another rank's error can come in before the fault line that
		// preceded it (each rank's output is read on its own): a close
		// fault's peers learn of it at once. Give that line a moment; the
		// judge orders events by their own times.
		t.wait(time.Now().Add(faultLineGrace), func() bool {
			var ok bool
			point, ok = d.event(faults.EvFault)
			return ok || d.exited()
		})
	}
	if !reached || point.Kind == "" {
		t.setup = "no fault point: " + t.early()
		return
	}
	if f.Signalled() {
		d.ack()
	}
	if f.SelfInflicted() || t.s.targetless(f, sp.mode) {
		t.faultAt = point.At()
		return
	}
	time.Sleep(sp.jitter)
	// The fault's time is taken before the signal: a survivor may see a
	// killed peer's connections close before kill(2) has returned here.
	t.faultAt = time.Now()
	switch f {
	case faults.Kill9:
		d.signal(syscall.SIGKILL)
	case faults.Stop, faults.StopCont, faults.Pause:
		d.signal(syscall.SIGSTOP)
	}
}

// early describes why the job did not reach the fault point.
func (t *trial) early() string {
	var parts []string
	for _, p := range t.procs {
		e, erred := p.event(faults.EvError)
		if x := p.exit(); x != "" || erred {
			parts = append(parts, strings.TrimSpace(fmt.Sprintf("rank %d %s %s", p.rank, cmpOr(x, "failed:"), e.Err)))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("not reached within %v", t.s.startLimit(t.sp.n))
	}
	return strings.Join(parts, "; ")
}

// mustEnd reports whether rank p must end by itself (not being the faulty
// rank of a fault that leaves it dead or stopped).
func (t *trial) mustEnd(p *proc) bool {
	if p.rank != t.sp.faulty {
		return true
	}
	switch t.sp.scen.fault {
	case faults.Kill9, faults.Stop, faults.StopRead:
		return false
	}
	return true
}

// deadline returns the time by which rank p must have ended, or false if
// it need not end by itself (the faulty rank of a fault that leaves it
// dead or stopped: it is killed last, or a stopped rank not yet continued).
func (t *trial) deadline(p *proc) (time.Time, bool) {
	if !t.mustEnd(p) {
		return time.Time{}, false
	}
	if t.setup != "" || t.faultAt.IsZero() {
		return t.setupAt.Add(t.s.exitBound()), true
	}
	if p.rank == t.sp.faulty && t.sp.scen.fault == faults.StopCont {
		if t.contAt.IsZero() {
			return time.Time{}, false
		}
		return t.contAt.Add(t.s.exitBound()), true // the resumed rank
	}
	d := t.faultAt.Add(t.s.exitBound())
	if t.sp.scen.fault == faults.Pause {
		d = d.Add(t.s.timeout / 3)
	}
	return d, true
}

// reported reports whether every survivor has reported its error or its
// success, or ended.
func (t *trial) reported() bool {
	for _, p := range t.procs {
		if p.rank == t.sp.faulty && t.sp.scen.fault.KillsARank() || p.exited() {
			continue
		}
		if _, ok := p.event(faults.EvError); ok {
			continue
		}
		if _, ok := p.event(faults.EvDone); ok {
			continue
		}
		return false
	}
	return true
}

// finish runs the trial to its end: it continues a stopped rank when due,
// lets the ranks holding after their error go on to Close once every
// survivor has reported (or the bound has passed), waits for the ranks
// that must end, each until its deadline (one still running then hung, and
// is killed), and kills the faulty rank last.
func (t *trial) finish() {
	sp, f := t.sp, t.sp.scen.fault
	t.setupAt = time.Now()
	var contDue time.Time // when to continue the stopped rank
	if t.setup == "" && f == faults.StopCont {
		// Only after the survivors' bound: a wait that reaches the
		// timeout keeps waiting a grace (up to a second) for failure
		// notices, and may have begun after the stop, so a rank continued
		// at the timeout plus a second could still be in time for its
		// peers, who then rightly go on with the job (as after pause).
		contDue = t.faultAt.Add(t.s.bound())
	}
	if t.setup == "" && f == faults.Pause {
		contDue = t.faultAt.Add(t.s.timeout / 3) // shorter: nobody may notice
	}
	released := false
	releaseDue := t.faultAt.Add(t.s.bound())
	if t.setup != "" || t.faultAt.IsZero() {
		releaseDue = time.Now()
	}
	for {
		now := time.Now()
		if !contDue.IsZero() && !now.Before(contDue) {
			t.procs[sp.faulty].signal(syscall.SIGCONT)
			t.contAt, contDue = time.Now(), time.Time{}
		}
		if !released && (!now.Before(releaseDue) || t.reported()) {
			for _, p := range t.procs {
				p.release()
			}
			released = true
		}
		next := contDue
		if !released && (next.IsZero() || releaseDue.Before(next)) {
			next = releaseDue
		}
		pending := false
		for _, p := range t.procs {
			d, ok := t.deadline(p)
			p.mu.Lock()
			killed := p.killed
			p.mu.Unlock()
			if !ok || killed || p.exited() {
				continue // (a killed rank that cannot be reaped is left to the orphan count)
			}
			pending = true
			if !now.Before(d) {
				p.mu.Lock()
				p.killed = true // hung
				p.mu.Unlock()
				p.dumpAndKill()
				continue
			}
			if next.IsZero() || d.Before(next) {
				next = d
			}
		}
		if !pending && contDue.IsZero() && released {
			break // every rank that had to end has ended
		}
		if !next.IsZero() {
			t.sleep(next)
		}
	}
	for _, p := range t.procs {
		p.signal(syscall.SIGCONT) // a stopped process dies at once either way
		p.kill()
	}
}

// sleep waits until the given time or until a rank reports or ends.
func (t *trial) sleep(until time.Time) {
	timer := time.NewTimer(time.Until(until))
	defer timer.Stop()
	select {
	case <-t.notify:
	case <-timer.C:
	}
}
