//go:build unix

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// raceEnabled is set by race_test.go; rmarun is then built with -race too.
var raceEnabled bool

// Binaries built by TestMain.
var rmarunBin, childBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "rmarun-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	rmarunBin = filepath.Join(dir, "rmarun")
	childBin = filepath.Join(dir, "child")
	code := 1
	if err := goBuild(rmarunBin, ".", raceEnabled); err != nil {
		fmt.Fprintln(os.Stderr, "building rmarun:", err)
	} else if err := goBuild(childBin, "./testdata/child", false); err != nil {
		fmt.Fprintln(os.Stderr, "building the test child:", err)
	} else {
		code = m.Run()
	}
	os.RemoveAll(dir)
	os.Exit(code)
}

func goBuild(out, pkg string, race bool) error {
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	cmd := exec.Command("go", append(args, pkg)...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	return cmd.Run()
}

// command returns an rmarun command with the given arguments and an
// environment without RMAGO_* variables. If the test is about to reach the
// go test deadline, rmarun is killed (and its ranks with it) so that a hang
// fails the test instead of leaving processes behind.
func command(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	ctx := t.Context()
	if deadline, ok := t.Deadline(); ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline.Add(-5*time.Second))
		t.Cleanup(cancel)
	}
	cmd := exec.CommandContext(ctx, rmarunBin, args...)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "RMAGO_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if raceEnabled { // skip the race runtime's 1 s sleep at exit
		cmd.Env = append(cmd.Env, "GORACE="+os.Getenv("GORACE")+" atexit_sleep_ms=0")
	}
	return cmd
}

// rmarun runs rmarun to completion and returns its output and exit status.
func rmarun(t *testing.T, env []string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := command(t, args...)
	cmd.Env = append(cmd.Env, env...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	var exitErr *exec.ExitError
	if err != nil && !errors.As(err, &exitErr) {
		t.Fatalf("running rmarun: %v", err)
	}
	if strings.Contains(e.String(), "DATA RACE") {
		t.Errorf("race in rmarun:\n%s", e.String())
	}
	if cmd.ProcessState.ExitCode() < 0 {
		t.Fatalf("rmarun did not exit normally: %v\nstderr:\n%s", cmd.ProcessState, e.String())
	}
	return o.String(), e.String(), cmd.ProcessState.ExitCode()
}

var prefixed = regexp.MustCompile(`^\[(\d+)\] (.*)$`)

// byRank splits prefixed output lines by rank. It fails the test on a line
// without a prefix or on output not ending in a newline.
func byRank(t *testing.T, out string) map[int][]string {
	t.Helper()
	if out != "" && !strings.HasSuffix(out, "\n") {
		t.Errorf("output does not end with a newline: %q", out)
	}
	lines := make(map[int][]string)
	for _, line := range strings.Split(strings.TrimSuffix(out, "\n"), "\n") {
		if line == "" && out == "" {
			break
		}
		m := prefixed.FindStringSubmatch(line)
		if m == nil {
			t.Errorf("line without rank prefix: %.100q", line)
			continue
		}
		rank, _ := strconv.Atoi(m[1])
		lines[rank] = append(lines[rank], m[2])
	}
	return lines
}

// checkGone fails the test if any process named in a "ready pid=N" line of
// out still exists.
func checkGone(t *testing.T, out string) {
	t.Helper()
	for _, m := range regexp.MustCompile(`ready pid=(\d+)`).FindAllStringSubmatch(out, -1) {
		pid, _ := strconv.Atoi(m[1])
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("rank process %d is still there (kill 0: %v)", pid, err)
		}
	}
}

func TestEnvironment(t *testing.T) {
	stdout, stderr, code := rmarun(t, nil, "-n", "4", childBin, "env")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	ranks := byRank(t, stdout)
	if len(ranks) != 4 {
		t.Fatalf("output from %d ranks, want 4:\n%s", len(ranks), stdout)
	}
	shared := make(map[string]string) // variable -> value seen by rank 0
	for rank := range 4 {
		env := make(map[string]string)
		for _, line := range ranks[rank] {
			k, v, _ := strings.Cut(line, "=")
			env[k] = v
		}
		if got := env["RMAGO_RANK"]; got != strconv.Itoa(rank) {
			t.Errorf("rank %d: RMAGO_RANK=%q", rank, got)
		}
		if _, ok := env["RMAGO_PROVIDER"]; ok {
			t.Errorf("rank %d: RMAGO_PROVIDER set without -provider", rank)
		}
		for _, k := range []string{"RMAGO_SIZE", "RMAGO_SECRET", "RMAGO_RENDEZVOUS", "RMAGO_ADDR", "RMAGO_JOBID"} {
			if rank == 0 {
				shared[k] = env[k]
			} else if env[k] != shared[k] {
				t.Errorf("rank %d: %s=%q, rank 0 has %q", rank, k, env[k], shared[k])
			}
		}
	}
	if shared["RMAGO_SIZE"] != "4" {
		t.Errorf("RMAGO_SIZE=%q, want 4", shared["RMAGO_SIZE"])
	}
	if b, err := hex.DecodeString(shared["RMAGO_SECRET"]); err != nil || len(b) != 32 {
		t.Errorf("RMAGO_SECRET=%q is not 64 hex characters", shared["RMAGO_SECRET"])
	}
	if shared["RMAGO_ADDR"] != "127.0.0.1" {
		t.Errorf("RMAGO_ADDR=%q, want 127.0.0.1", shared["RMAGO_ADDR"])
	}
	if host, port, err := net.SplitHostPort(shared["RMAGO_RENDEZVOUS"]); err != nil || host != "127.0.0.1" || port == "0" {
		t.Errorf("RMAGO_RENDEZVOUS=%q, want 127.0.0.1:PORT", shared["RMAGO_RENDEZVOUS"])
	}
	if _, err := hex.DecodeString(shared["RMAGO_JOBID"]); err != nil || shared["RMAGO_JOBID"] == "" {
		t.Errorf("RMAGO_JOBID=%q is not hex", shared["RMAGO_JOBID"])
	}

	// A second job gets a different secret.
	stdout, _, _ = rmarun(t, nil, "-n", "1", childBin, "env")
	if strings.Contains(stdout, shared["RMAGO_SECRET"]) {
		t.Error("two jobs got the same secret")
	}
}

// TestRendezvousInherited: rank 0, and only rank 0, gets rmarun's
// listener on the rendezvous port (no other process can take the port
// between rmarun's choice and rank 0's start), and the job joins through
// it.
func TestRendezvousInherited(t *testing.T) {
	stdout, stderr, code := rmarun(t, nil, "-n", "3", childBin, "getenv=RMAGO_RENDEZVOUS_FD", "init", "barrier", "close")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	ranks := byRank(t, stdout)
	for rank := range 3 {
		lines := strings.Join(ranks[rank], "\n")
		inherited := strings.Contains(lines, "RMAGO_RENDEZVOUS_FD=")
		if inherited != (rank == 0) {
			t.Errorf("rank %d: inherited a rendezvous listener: %v, want %v:\n%s", rank, inherited, rank == 0, lines)
		}
		if !strings.Contains(lines, "joined") {
			t.Errorf("rank %d did not join:\n%s", rank, lines)
		}
	}
}

func TestProvider(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  []string
		args []string
		want string
	}{
		{"flag", nil, []string{"-provider", "soft"}, "[0] RMAGO_PROVIDER=soft\n"},
		{"inherited", []string{"RMAGO_PROVIDER=ibv"}, nil, "[0] RMAGO_PROVIDER=ibv\n"},
		{"flag overrides", []string{"RMAGO_PROVIDER=ibv"}, []string{"-provider", "auto"}, "[0] RMAGO_PROVIDER=auto\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tc.args, childBin, "env")
			stdout, stderr, code := rmarun(t, tc.env, args...)
			if code != 0 || !strings.Contains(stdout, tc.want) {
				t.Errorf("exit status %d, output:\n%s%s\nwant line %q", code, stdout, stderr, tc.want)
			}
		})
	}
}

func TestOutputPrefix(t *testing.T) {
	stdout, stderr, code := rmarun(t, nil, "-n", "3", childBin, "out=hello", "err=oops", "nonl=tail")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	out, errs := byRank(t, stdout), byRank(t, stderr)
	for rank := range 3 {
		if got := strings.Join(out[rank], "|"); got != "hello|tail" {
			t.Errorf("rank %d stdout lines %q, want hello|tail", rank, got)
		}
		if got := strings.Join(errs[rank], "|"); got != "oops" {
			t.Errorf("rank %d stderr lines %q, want oops", rank, got)
		}
	}
}

func TestQuietPrefix(t *testing.T) {
	stdout, stderr, code := rmarun(t, nil, "-quiet-prefix", "-n", "2", childBin, "out=hello", "nonl=tail")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	lines := strings.Split(stdout, "\n")
	if len(lines) != 5 || lines[4] != "" || strings.Count(stdout, "hello\n") != 2 || strings.Count(stdout, "tail\n") != 2 {
		t.Errorf("output %q, want two hello and two tail lines", stdout)
	}
}

func TestLinesDoNotMix(t *testing.T) {
	const ranks, lines = 4, 300
	stdout, stderr, code := rmarun(t, nil, "-n", strconv.Itoa(ranks), childBin, "spam="+strconv.Itoa(lines))
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	for rank, got := range byRank(t, stdout) {
		if len(got) != lines {
			t.Errorf("rank %d: %d lines, want %d", rank, len(got), lines)
		}
		for i, line := range got {
			want := fmt.Sprintf("%d:%d:%s", rank, i, strings.Repeat("x", 1000+i*37%5000))
			if line != want {
				t.Errorf("rank %d line %d is mangled: %.80q...", rank, i, line)
				break
			}
		}
	}
}

func TestRankFails(t *testing.T) {
	stdout, stderr, code := rmarun(t, nil, "-n", "4", childBin, "ready", "exit=3@2", "sleep")
	if code != 3 {
		t.Errorf("exit status %d, want 3", code)
	}
	if !strings.Contains(stderr, "rmarun: rank 2 exited with status 3") {
		t.Errorf("stderr does not name rank 2 and status 3:\n%s", stderr)
	}
	if n := strings.Count(stderr, "rmarun:"); n != 1 {
		t.Errorf("%d rmarun messages, want 1:\n%s", n, stderr)
	}
	byRank(t, stdout)
	checkGone(t, stdout)
}

func TestRankPanics(t *testing.T) {
	stdout, stderr, code := rmarun(t, nil, "-n", "2", childBin, "ready", "panic@0", "sleep")
	if code != 2 || !strings.Contains(stderr, "rmarun: rank 0 exited with status 2") {
		t.Errorf("exit status %d, stderr:\n%s", code, stderr)
	}
	checkGone(t, stdout)
}

// A rank killed by SIGKILL is reported, and a rank ignoring SIGTERM is
// killed after the grace period.
func TestRankKilled(t *testing.T) {
	stdout, stderr, code := rmarun(t, nil, "-n", "3", childBin, "ignoreterm", "ready", "kill@1", "sleep")
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	if !strings.Contains(stderr, "rmarun: rank 1 was killed by signal 9") {
		t.Errorf("stderr does not report rank 1 killed by signal 9:\n%s", stderr)
	}
	checkGone(t, stdout)
}

func TestTimeout(t *testing.T) {
	stdout, stderr, code := rmarun(t, nil, "-timeout", "100ms", "-n", "2", childBin, "ready", "sleep")
	if code != 124 || !strings.Contains(stderr, "rmarun: job timed out after 100ms") {
		t.Errorf("exit status %d, stderr:\n%s", code, stderr)
	}
	checkGone(t, stdout)
}

func TestStartFailure(t *testing.T) {
	_, stderr, code := rmarun(t, nil, "-n", "2", filepath.Join(t.TempDir(), "missing"))
	if code != 1 || !strings.Contains(stderr, "rmarun: rank 0 could not be started") {
		t.Errorf("exit status %d, stderr:\n%s", code, stderr)
	}
}

func TestSignalForwarded(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			const ranks = 3
			cmd := command(t, "-n", strconv.Itoa(ranks), childBin, "ready", "sleep")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			pipe, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			sc := bufio.NewScanner(io.TeeReader(pipe, &out))
			for ready := 0; ready < ranks && sc.Scan(); {
				if strings.Contains(sc.Text(), "ready") {
					ready++
				}
			}
			cmd.Process.Signal(sig)
			io.Copy(&out, pipe) // the scanner's reads are already in out
			cmd.Wait()
			if code := cmd.ProcessState.ExitCode(); code != 128+int(sig) {
				t.Errorf("exit status %d (%v), want %d; stderr:\n%s", code, cmd.ProcessState, 128+int(sig), stderr.String())
			}
			if !strings.Contains(stderr.String(), "rmarun: received "+sig.String()) || strings.Contains(stderr.String(), "DATA RACE") {
				t.Errorf("stderr does not report the signal:\n%s", stderr.String())
			}
			checkGone(t, out.String())
		})
	}
}

func TestBadUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-n", "4"},
		{"-n", "0", childBin},
		{"-n", "-1", childBin},
		{"-provider", "tcp", childBin},
		{"-addr", "localhost:1", childBin},
		{"-timeout", "-1s", childBin},
		{"-bogus", childBin},
	} {
		_, stderr, code := rmarun(t, nil, args...)
		if code != 2 || !strings.Contains(stderr, "usage: rmarun") {
			t.Errorf("rmarun %q: exit status %d, stderr:\n%s", args, code, stderr)
		}
	}
}

// TestBadSettingFailsOnce: a bad RMAGO_* value (from rmarun's environment
// or -x) fails in rmarun, before any rank starts, naming the variable.
func TestBadSettingFailsOnce(t *testing.T) {
	for _, c := range []struct {
		env  string
		args []string
		name string
	}{
		{"RMAGO_TIMEOUT=xyz", nil, "RMAGO_TIMEOUT"},
		{"", []string{"-x", "RMAGO_CONNECT=maybe"}, "RMAGO_CONNECT"},
	} {
		if c.env != "" {
			k, v, _ := strings.Cut(c.env, "=")
			t.Setenv(k, v)
		}
		var stderr strings.Builder
		args := append(append([]string{"-n", "2"}, c.args...), "/bin/true")
		if rc := run(args, &stderr); rc != 2 || !strings.Contains(stderr.String(), c.name) {
			t.Errorf("%s %v: exit %d, stderr %q; want 2 naming %s", c.env, c.args, rc, stderr.String(), c.name)
		}
	}
}
