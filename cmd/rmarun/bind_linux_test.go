package main

import (
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The units of a policy cover the CPUs allowed, each once.
func TestCPUUnits(t *testing.T) {
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		t.Fatal(err)
	}
	for _, policy := range []string{bindCore, bindHWThread} {
		units := cpuUnits(allowed, policy)
		var union unix.CPUSet
		n := 0
		for _, u := range units {
			for cpu := range maxCPUs {
				if u.IsSet(cpu) {
					if union.IsSet(cpu) {
						t.Errorf("%s: CPU %d in two units", policy, cpu)
					}
					union.Set(cpu)
					n++
				}
			}
		}
		if union != allowed || n != allowed.Count() {
			t.Errorf("%s: units %v cover %s, want %s", policy, units, cpuList(union), cpuList(allowed))
		}
		if policy == bindHWThread && len(units) != allowed.Count() {
			t.Errorf("hwthread: %d units for %d CPUs", len(units), allowed.Count())
		}
	}
}

// Each rank of a bound job runs on its own hardware thread, its Go runtime
// sized by it, and knows it has it to itself; the ranks still join and
// meet. Dealt round, with --oversubscribe, ranks share a thread and are
// told so; without it the job does not start.
func TestBindHWThread(t *testing.T) {
	unsetGOMAXPROCS(t)
	n := min(runtime.NumCPU(), 4)
	stdout, stderr, code := rmarun(t, nil, "-n", strconv.Itoa(n), "-bind-to", "hwthread",
		childBin, "cpus", "getenv=RMAGO_BOUND", "init", "barrier", "close")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	seen := map[string]int{}
	for rank, lines := range byRank(t, stdout) {
		var cpus string
		if _, err := fmt.Sscanf(lines[0], "cpus=%s gomaxprocs=1", &cpus); err != nil || strings.ContainsAny(cpus, ",-") {
			t.Errorf("rank %d: %q, want one CPU and GOMAXPROCS 1", rank, lines[0])
		}
		if r, ok := seen[cpus]; ok {
			t.Errorf("ranks %d and %d both on CPU %s", r, rank, cpus)
		}
		seen[cpus] = rank
		if lines[1] != "RMAGO_BOUND=1" {
			t.Errorf("rank %d: %q, want RMAGO_BOUND=1", rank, lines[1])
		}
	}
	if len(seen) != n {
		t.Errorf("%d ranks reported, want %d:\n%s", len(seen), n, stdout)
	}

	m := runtime.NumCPU() + 1
	_, stderr, code = rmarun(t, nil, "-n", strconv.Itoa(m), "-bind-to", "hwthread", childBin, "cpus")
	if code == 0 || !strings.Contains(stderr, "--oversubscribe") {
		t.Errorf("%d ranks on %d threads: exit status %d, stderr:\n%s", m, m-1, code, stderr)
	}
	stdout, stderr, code = rmarun(t, nil, "-n", strconv.Itoa(m), "-bind-to", "hwthread", "--oversubscribe", childBin, "cpus", "getenv=RMAGO_BOUND")
	if code != 0 {
		t.Fatalf("oversubscribed: exit status %d, stderr:\n%s", code, stderr)
	}
	ranks := byRank(t, stdout)
	if ranks[0][0] != ranks[m-1][0] || ranks[0][1] != "RMAGO_BOUND=2" || ranks[m-1][1] != "RMAGO_BOUND=2" {
		t.Errorf("ranks 0 and %d should share a thread and know it: %q, %q", m-1, ranks[0], ranks[m-1])
	}
}

// A remote host's agent binds its own ranks, dealing its own CPUs: the
// first rank of each host gets the host's first core.
func TestBindRemote(t *testing.T) {
	unsetGOMAXPROCS(t)
	stdout, stderr, code := rmarun(t, nil, "-H", "localhost:1,127.0.0.2:1", "--launcher-exec", fakeSSH(t),
		"-bind-to", "core", childBin, "cpus", "getenv=RMAGO_BOUND", "init", "barrier", "close")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	ranks := byRank(t, stdout)
	if len(ranks) != 2 || len(ranks[0]) < 2 || len(ranks[1]) < 2 {
		t.Fatalf("output:\n%s", stdout)
	}
	for rank, lines := range ranks {
		if lines[0] != ranks[0][0] || lines[1] != "RMAGO_BOUND=1" {
			t.Errorf("rank %d: %q, want the first core (%q) to itself", rank, lines[:2], ranks[0][0])
		}
	}
}

// unsetGOMAXPROCS empties the GOMAXPROCS variable for the test's ranks: a
// bound rank sizes its runtime by its unit unless the user set it
// (launch.CoreShare), as the tests' own runs may (GOMAXPROCS=8 go test).
func unsetGOMAXPROCS(t *testing.T) {
	t.Setenv("GOMAXPROCS", "")
}
