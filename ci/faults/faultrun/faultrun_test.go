package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rmago/rmago/ci/faults"
)

func TestWriteSection(t *testing.T) {
	path := filepath.Join(t.TempDir(), "reliability.md")
	if err := writeSection(path, "soft", "## Fault injection\n\none\n"); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	want := "# Reliability\n\n" + beginMarker + "\n## Fault injection\n\none\n" + endMarker + "\n"
	if string(got) != want {
		t.Fatalf("new file:\n%s", got)
	}
	// Another section around ours survives a rewrite.
	other := "# Reliability\n\n## Lock scaling\n\ntable\n\n" + beginMarker + "\nold\n" + endMarker + "\n\n## After\n"
	os.WriteFile(path, []byte(other), 0o644)
	if err := writeSection(path, "soft", "new\n"); err != nil {
		t.Fatal(err)
	}
	got, _ = os.ReadFile(path)
	want = "# Reliability\n\n## Lock scaling\n\ntable\n\n" + beginMarker + "\nnew\n" + endMarker + "\n\n## After\n"
	if string(got) != want {
		t.Fatalf("rewrite:\n%s", got)
	}
	// A file without the markers gets the section appended.
	os.WriteFile(path, []byte("# Reliability\n\n## Lock scaling\n"), 0o644)
	writeSection(path, "soft", "x\n")
	got, _ = os.ReadFile(path)
	want = "# Reliability\n\n## Lock scaling\n\n" + beginMarker + "\nx\n" + endMarker + "\n"
	if string(got) != want {
		t.Fatalf("append:\n%s", got)
	}
	// Another provider's section goes after it, and each rewrite keeps the
	// other provider's section.
	b, e := markers("shm")
	writeSection(path, "shm", "y\n")
	writeSection(path, "soft", "x2\n")
	writeSection(path, "shm", "y2\n")
	got, _ = os.ReadFile(path)
	want = "# Reliability\n\n## Lock scaling\n\n" + beginMarker + "\nx2\n" + endMarker + "\n\n" + b + "\ny2\n" + e + "\n"
	if string(got) != want {
		t.Fatalf("two providers:\n%s", got)
	}
}

// TestOrphans: a process carrying a trial's marker, detached from its
// parent, is found, counted and killed; a process without it is not.
func TestOrphans(t *testing.T) {
	marker := "test" + strings.ReplaceAll(t.Name(), "/", "")
	start := func(mark bool) *exec.Cmd {
		cmd := exec.Command("sleep", "60")
		if mark {
			cmd.Env = append(os.Environ(), trialEnv+"="+marker)
		}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			t.Skip("no sleep command:", err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	marked, other := start(true), start(false)
	if got := jobProcs(marker); len(got) != 1 || got[0] != marked.Process.Pid {
		t.Fatalf("jobProcs = %v, want [%d]", got, marked.Process.Pid)
	}
	if n := reapOrphans(marker); n != 1 {
		t.Fatalf("reapOrphans = %d, want 1", n)
	}
	// Killed: it is a zombie until waited for, and jobProcs skips zombies.
	if got := jobProcs(marker); len(got) != 0 {
		t.Fatalf("after reapOrphans: %v", got)
	}
	marked.Wait()
	if err := syscall.Kill(other.Process.Pid, 0); err != nil {
		t.Fatalf("the unmarked process was touched: %v", err)
	}
}

// TestVerdict: the judgement of a survivor from its reported events.
func TestVerdict(t *testing.T) {
	s := &settings{timeout: 3 * time.Second, slack: 2 * time.Second, margin: time.Second}
	f0 := time.Unix(1000, 0)
	tr := &trial{s: s, sp: spec{scen: scenario{fault: faults.Kill9, mode: faults.Fence}, n: 3, faulty: 2}, faultAt: f0}
	ev := func(after time.Duration, class faults.Class, names ...int) *proc {
		p := &proc{rank: 0, done: make(chan struct{})}
		p.events = []faults.Event{{Kind: faults.EvError, Time: f0.Add(after).UnixNano(), Class: class, Names: names, Err: "e"}}
		return p
	}
	for _, c := range []struct {
		p    *proc
		want string
	}{
		{ev(10*time.Millisecond, faults.ClassPeer, 2), ""},
		{ev(10*time.Millisecond, faults.ClassPeer, 1, 2), ""},
		{ev(10*time.Millisecond, faults.ClassTimeout, 2), "wrong class (timeout)"},
		{ev(10*time.Millisecond, faults.ClassPeer, 1), "does not name the faulty rank"},
		{ev(10*time.Millisecond, faults.ClassPeer), "does not name the faulty rank"},
		{ev(6*time.Second, faults.ClassPeer, 2), "late"},
		{ev(-time.Millisecond, faults.ClassPeer, 2), "error before the fault"},
	} {
		e, _ := c.p.event(faults.EvError)
		if why, _ := tr.verdict(c.p, e, true); why != c.want {
			t.Errorf("%+v: %q, want %q", e, why, c.want)
		}
	}
	done := &proc{rank: 1, done: make(chan struct{})}
	done.events = []faults.Event{{Kind: faults.EvDone}}
	if why, _ := tr.verdict(done, faults.Event{}, false); why != "no error" {
		t.Errorf("a survivor that finished: %q", why)
	}
}

// TestTrials runs real trials of the faults that today's library handles:
// kill -9 in every mode and a short pause, on 2 and 3 ranks. The bound is
// made loose (no timing threshold): classes, names, hangs, orphans and
// data are what is tested.
func TestTrials(t *testing.T) {
	if testing.Short() {
		t.Skip("builds faultrank and runs jobs")
	}
	bin := filepath.Join(t.TempDir(), "faultrank")
	if out, err := exec.Command("go", "build", "-o", bin, "../faultrank").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	s := &settings{rankBin: bin, timeout: 6 * time.Second, slack: time.Minute, margin: 10 * time.Second,
		words: 64, stopReadWords: 64, burst: 1}
	for i, sp := range []spec{
		{scen: scenario{faults.Kill9, faults.Fence}, n: 2, faulty: 1, at: 3},
		{scen: scenario{faults.Kill9, faults.PSCW}, n: 3, faulty: 0, at: 4},
		{scen: scenario{faults.Kill9, faults.Lock}, n: 3, faulty: 2, at: 3},
		{scen: scenario{faults.Kill9, faults.LockAll}, n: 2, faulty: 0, at: 4},
		{scen: scenario{faults.Pause, faults.Fence}, n: 3, faulty: 1, at: 3},
	} {
		sp.index, sp.mode = i, sp.scen.mode
		r := runTrial(s, sp)
		n, right, hangs, corrupt := r.survivors()
		if !r.ok() || n != sp.n-1 && sp.scen.fault == faults.Kill9 || right != n || hangs != 0 || corrupt != 0 || r.orphans != 0 {
			t.Errorf("%s: %d/%d right, %d hangs, %d corrupt, %d orphans:\n%s", sp, right, n, hangs, corrupt, r.orphans, r.log)
		}
	}
}

func TestHangSite(t *testing.T) {
	dump := `SIGQUIT: quit
PC=0x4744a1 m=0 sigcode=0

goroutine 1 gp=0xc000002380 m=nil [sync.Cond.Wait, 1 minutes]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
	/usr/local/go/src/runtime/proc.go:435 +0xce
sync.(*Cond).Wait(0xc0000b4050)
	/usr/local/go/src/sync/cond.go:71 +0x85
github.com/rmago/rmago/transport.(*Fabric).waitUntil(0xc0000b4000, 0xc00001c0f0, 0xffffffffffffffff, {0x0, 0x0, 0x0}, 0xc000010018)
	/work/wt/x/transport/fabric.go:770 +0x1a5
github.com/rmago/rmago/transport.(*Fabric).TagBarrier(0xc0000b4000, 0x10001)
	/work/wt/x/transport/fabric.go:880 +0x95
github.com/rmago/rmago/rma.(*World).Close(0xc0000c2000)
	/work/wt/x/rma/world.go:232 +0x1b5
main.run()
	/work/wt/x/ci/faults/faultrank/main.go:140 +0x8b5

goroutine 2 gp=0xc000002e00 m=nil [force gc (idle)]:
runtime.gopark(0x0?, 0x0?, 0x0?, 0x0?, 0x0?)
`
	want := "[sync.Cond.Wait, 1 minutes] transport.(*Fabric).waitUntil (fabric.go:770) < transport.(*Fabric).TagBarrier < rma.(*World).Close"
	if got := hangSite(dump); got != want {
		t.Errorf("hangSite:\n got %s\nwant %s", got, want)
	}
	if got := hangSite("no dump"); got != "" {
		t.Errorf("without a dump: %q", got)
	}
}
