package main

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/rmago/rmago/ci/faults"
)

// Verdicts that the report treats apart.
const (
	whySetup         = "trial failed before the fault"
	whyNoErrorInTime = "no error by the deadline" // and hung
	whyNotDone       = "not done by the deadline" // and hung
	whyCorrupt       = "corrupt data"
	whyRace          = "data race"
)

// judge decides what rank p of the trial came to.
func (t *trial) judge(p *proc) rankResult {
	sp, f := t.sp, t.sp.scen.fault
	rr := rankResult{rank: p.rank, survivor: p.rank != sp.faulty || !f.KillsARank()}
	p.mu.Lock()
	rr.hung = p.killed
	p.mu.Unlock()
	if v, ok := p.event(faults.EvVerify); ok {
		rr.corrupt, rr.checked, rr.corrupt1 = v.Corrupt, v.Checked, v.First
	}
	out := p.output()
	if i := strings.Index(out, "WARNING: DATA RACE"); i >= 0 {
		rr.race, rr.raceSite = true, frames(out[i:], 3)
	}
	ev, erred := p.event(faults.EvError)
	if erred {
		rr.class = ev.Class
		if !t.faultAt.IsZero() {
			rr.after = ev.At().Sub(t.faultAt)
		}
	}
	if rr.hung {
		_, done := p.event(faults.EvDone)
		switch {
		case !rr.survivor:
			rr.hangWhy = "the faulty rank hung"
		case erred:
			rr.hangWhy = "hung after its error"
		case done:
			rr.hangWhy = "hung after finishing"
		default:
			rr.hangWhy = "hung without an error"
		}
		rr.hangSite = hangSite(out)
	}
	if !rr.survivor {
		return rr
	}
	why, detail := t.verdict(p, ev, erred)
	rr.right = why == ""
	rr.why = why
	if detail != "" {
		rr.detail = detail
	}
	return rr
}

// hangSite summarizes where the main goroutine of a hung rank was, from
// the goroutine dump it printed on SIGQUIT: its wait state and the
// innermost rmago frames, e.g. "[sync.Cond.Wait] transport.(*Fabric).waitUntil
// (fabric.go:770) < transport.(*Fabric).Barrier < rma.(*World).Close".
func hangSite(out string) string {
	i := strings.Index(out, "goroutine 1 ")
	if i < 0 {
		return ""
	}
	block := out[i:]
	if j := strings.Index(block, "\n\n"); j >= 0 {
		block = block[:j]
	}
	lines := strings.Split(block, "\n")
	state := ""
	if a, b := strings.IndexByte(lines[0], '['), strings.IndexByte(lines[0], ']'); a >= 0 && b > a {
		state = lines[0][a : b+1]
	}
	f := frames(strings.Join(lines[1:], "\n"), 4)
	if f == "" {
		f = "outside rmago"
	}
	return strings.TrimSpace(state + " " + f)
}

// frames returns the first n frames of the rmago library (not of the
// suite) in a Go traceback, innermost first, the first with its file and
// line: "transport.(*Fabric).waitUntil (fabric.go:770) < ...".
func frames(trace string, n int) string {
	const mod = "github.com/rmago/rmago/"
	lines := strings.Split(trace, "\n")
	var out []string
	for k := 0; k < len(lines) && len(out) < n; k++ {
		l := strings.TrimSpace(lines[k])
		if !strings.HasPrefix(l, mod) || strings.HasPrefix(l, mod+"ci/") {
			continue
		}
		f := strings.TrimPrefix(l, mod)
		if p := strings.LastIndexByte(f, '('); p > 0 {
			f = f[:p]
		}
		if len(out) == 0 && k+1 < len(lines) {
			loc := strings.TrimSpace(lines[k+1])
			if sp := strings.IndexByte(loc, ' '); sp > 0 {
				loc = loc[:sp]
			}
			f += " (" + filepath.Base(loc) + ")"
		}
		out = append(out, f)
	}
	return strings.Join(out, " < ")
}

// verdict returns why survivor p did not come to the right end ("" if it
// did) and the message behind it.
func (t *trial) verdict(p *proc, ev faults.Event, erred bool) (string, string) {
	f, bound := t.sp.scen.fault, t.s.bound()
	if t.setup != "" {
		return whySetup, t.setup
	}
	if !f.KillsARank() {
		// The job must finish as if nothing happened.
		switch {
		case erred:
			return "error (" + string(ev.Class) + ")", ev.Err
		case p.killed:
			return whyNotDone, ""
		}
		if _, ok := p.event(faults.EvDone); !ok {
			return "no outcome (" + p.exit() + ")", lastWords(p)
		}
		if f.Bootstrap() {
			if r, ok := p.event(faults.EvReady); ok && r.At().Sub(t.faultAt) > bound {
				return "slow start", fmt.Sprintf("ready %.2fs after the launch (bound %v)", r.At().Sub(t.faultAt).Seconds(), bound)
			}
		}
		if c, _ := p.event(faults.EvClosed); c.Err != "" {
			return "Close failed (" + string(c.Class) + ")", c.Err
		}
		if x := p.exit(); x != "exit 0" {
			return "ended badly (" + x + ")", lastWords(p)
		}
		return "", ""
	}
	if !erred {
		if _, ok := p.event(faults.EvDone); ok {
			return "no error", "finished every epoch"
		}
		if p.killed {
			return whyNoErrorInTime, ""
		}
		return "no outcome (" + p.exit() + ")", lastWords(p)
	}
	after := ev.At().Sub(t.faultAt)
	detail := fmt.Sprintf("after %.2fs: %s", after.Seconds(), ev.Err)
	switch {
	case !faults.RightClass(f, ev.Class):
		return "wrong class (" + cmpOr(string(ev.Class), "none") + ")", detail
	case !slices.Contains(ev.Names, t.sp.faulty):
		return "does not name the faulty rank", detail
	case after < 0:
		return "error before the fault", detail
	case after > bound:
		return "late", detail
	}
	return "", ""
}

// lastWords is the end of what a rank said besides its events.
func lastWords(p *proc) string {
	out := strings.TrimSpace(p.output())
	if len(out) > 300 {
		out = "..." + out[len(out)-300:]
	}
	return out
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// describe writes the details of a trial: a line, and for a failed trial
// every rank that went wrong.
func (t *trial) describe(r *result) string {
	var b strings.Builder
	n, right, hangs, corrupt := r.survivors()
	verdict := "ok"
	if !r.ok() {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "%-4s %s: %d/%d right", verdict, r.spec, right, n)
	if t.sp.scen.fault.KillsARank() {
		var worst time.Duration
		for _, rr := range r.ranks {
			if rr.survivor && rr.class != faults.ClassNone {
				worst = max(worst, rr.after)
			}
		}
		fmt.Fprintf(&b, " (last error %.2fs after the fault)", worst.Seconds())
	}
	fmt.Fprintf(&b, ", %d hung, %d orphans, %d corrupt bytes, %.1fs\n", hangs, r.orphans, corrupt, r.wall.Seconds())
	if t.s.verbose {
		for _, p := range t.procs {
			fmt.Fprintf(&b, "     %s\n", t.timeline(p))
		}
	}
	if r.ok() {
		return b.String()
	}
	if r.setup != "" {
		fmt.Fprintf(&b, "     setup: %s\n", oneLine(r.setup, 400))
	}
	for i, rr := range r.ranks {
		if (rr.right || !rr.survivor) && !rr.hung && rr.corrupt == 0 && !rr.race {
			continue
		}
		what := rr.why
		if rr.hung {
			what = strings.TrimPrefix(what+", "+rr.hangWhy, ", ")
			if rr.hangSite != "" {
				what += " in " + rr.hangSite
			}
		}
		if rr.corrupt != 0 {
			what += fmt.Sprintf(", %d corrupt bytes (first: %s)", rr.corrupt, oneLine(rr.corrupt1, 200))
		}
		if rr.race {
			what += ", DATA RACE"
		}
		fmt.Fprintf(&b, "     rank %d: %s: %s\n", rr.rank, strings.TrimPrefix(what, ", "), oneLine(rr.detail, 400))
		if rr.race || strings.Contains(rr.why, "no outcome") {
			if out := strings.TrimSpace(t.procs[i].output()); out != "" {
				fmt.Fprintf(&b, "       output: %s\n", oneLine(out, 1500))
			}
		}
	}
	return b.String()
}

// oneLine shortens s to at most n bytes on one line.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n] + "..."
	}
	return s
}

// timeline is one line of what rank p reported, times after the fault.
func (t *trial) timeline(p *proc) string {
	var b strings.Builder
	fmt.Fprintf(&b, "rank %d:", p.rank)
	since := func(e faults.Event) string {
		if t.faultAt.IsZero() {
			return ""
		}
		return fmt.Sprintf(" %+.3fs", e.At().Sub(t.faultAt).Seconds())
	}
	p.mu.Lock()
	evs := slices.Clone(p.events)
	killed := p.killed
	p.mu.Unlock()
	for _, e := range evs {
		fmt.Fprintf(&b, " %s%s", e.Kind, since(e))
		switch {
		case e.Kind == faults.EvError || e.Kind == faults.EvClosed && e.Err != "":
			fmt.Fprintf(&b, " [%s %v: %s]", e.Class, e.Names, oneLine(e.Err, 160))
		case e.Kind == faults.EvVerify && e.Corrupt != 0:
			fmt.Fprintf(&b, " [%d corrupt: %s]", e.Corrupt, oneLine(e.First, 160))
		}
		b.WriteString(";")
	}
	if killed {
		b.WriteString(" HUNG, killed;")
	}
	fmt.Fprintf(&b, " %s", cmpOr(p.exit(), "running"))
	return b.String()
}
