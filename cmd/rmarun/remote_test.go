//go:build unix

package main

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// fakeSSH is the stand-in for ssh the tests give --launcher-exec: it runs
// the command here in a fresh environment (testdata/fakessh.sh).
func fakeSSH(t *testing.T) string {
	t.Helper()
	path, err := filepath.Abs("testdata/fakessh.sh")
	if err != nil {
		t.Fatal(err)
	}
	return path
}

// newTag returns a unique word to put on the command line of a test's
// ranks, to find them in the process table.
func newTag() string {
	b := make([]byte, 6)
	rand.Read(b)
	return "tag=" + hex.EncodeToString(b)
}

// procsWith returns the processes whose command line contains word.
func procsWith(word string) []string {
	var found []string
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		b, err := os.ReadFile(d + "/cmdline")
		if err != nil {
			continue
		}
		for _, arg := range bytes.Split(b, []byte{0}) {
			if string(arg) == word {
				found = append(found, filepath.Base(d)+": "+strings.ReplaceAll(string(b), "\x00", " "))
				break
			}
		}
	}
	return found
}

// agents returns the rmarun agents of this test binary still running.
func agents() []string {
	var found []string
	for _, p := range procsWith("-agent") {
		if strings.Contains(p, rmarunBin) {
			found = append(found, p)
		}
	}
	return found
}

// checkNoneLeft fails the test if a rank marked with tag, or an agent, is
// still in the process table.
func checkNoneLeft(t *testing.T, tag string) {
	t.Helper()
	if left := slices.Concat(procsWith(tag), agents()); len(left) > 0 {
		t.Errorf("processes left behind:\n%s", strings.Join(left, "\n"))
	}
}

// envOf returns rank's NAME=value lines as a map.
func envOf(lines []string) map[string]string {
	env := make(map[string]string)
	for _, l := range lines {
		if k, v, ok := strings.Cut(l, "="); ok {
			env[k] = v
		}
	}
	return env
}

func TestRemoteHosts(t *testing.T) {
	logf := filepath.Join(t.TempDir(), "log")
	env := []string{"FAKESSH_LOG=" + logf, "RMAGO_TIMEOUT=7s", "XFROM=launcher", "NOTFORWARDED=1"}
	stdout, stderr, code := rmarun(t, env, "-H", "localhost:1,127.0.0.2:2,127.0.0.3", "--launcher-exec", fakeSSH(t),
		"-x", "XSET=a b'c\"$HOME", "-x", "XFROM", "-provider", "soft",
		childBin, "env", "getenv=XSET", "getenv=XFROM", "getenv=NOTFORWARDED", "getenv=FAKESSH_HOST", "init", "barrier", "close", "out=done")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	ranks := byRank(t, stdout)
	if len(ranks) != 4 {
		t.Fatalf("output of %d ranks, want 4:\n%s", len(ranks), stdout)
	}
	wantHost := []string{"", "127.0.0.2", "127.0.0.2", "127.0.0.3"}
	rank0 := envOf(ranks[0])
	for rank := range 4 {
		e := envOf(ranks[rank])
		host, ok := e["FAKESSH_HOST"]
		if !ok {
			host = ""
		}
		if host != wantHost[rank] {
			t.Errorf("rank %d ran on host %q, want %q", rank, host, wantHost[rank])
		}
		for k, want := range map[string]string{
			"RMAGO_RANK": string(rune('0' + rank)), "RMAGO_SIZE": "4", "XSET": "a b'c\"$HOME", "XFROM": "launcher",
			"RMAGO_TIMEOUT": "7s", "RMAGO_PROVIDER": "soft",
			"RMAGO_SECRET": rank0["RMAGO_SECRET"], "RMAGO_RENDEZVOUS": rank0["RMAGO_RENDEZVOUS"], "RMAGO_JOBID": rank0["RMAGO_JOBID"],
		} {
			if e[k] != want {
				t.Errorf("rank %d: %s=%q, want %q", rank, k, e[k], want)
			}
		}
		if rank > 0 && !slices.Contains(ranks[rank], "NOTFORWARDED unset") {
			t.Errorf("rank %d got NOTFORWARDED, which was not given to -x", rank)
		}
		if got := ranks[rank][len(ranks[rank])-1]; got != "done" {
			t.Errorf("rank %d: last line %q, want done", rank, got)
		}
	}
	b, _ := os.ReadFile(logf)
	hosts := strings.Fields(string(b))
	slices.Sort(hosts)
	if !slices.Equal(hosts, []string{"127.0.0.2", "127.0.0.3"}) {
		t.Errorf("the launcher was run for hosts %q, want 127.0.0.2 and 127.0.0.3", hosts)
	}
	if len(rank0["RMAGO_SECRET"]) != 64 {
		t.Errorf("RMAGO_SECRET=%q", rank0["RMAGO_SECRET"])
	}
}

// A rank failing on a remote host stops every rank on every host; its rank
// and status are the ones reported.
func TestRemoteRankFails(t *testing.T) {
	for _, tc := range []struct {
		name, fail, want string
		code             int
	}{
		{"remote", "exit=5@3", "rmarun: rank 3 exited with status 5 on host 127.0.0.3; the job was stopped\n", 5},
		{"local", "exit=6@0", "rmarun: rank 0 exited with status 6; the job was stopped\n", 6},
		{"killed", "kill@1", "rmarun: rank 1 was killed by signal 9 (killed) on host 127.0.0.2; the job was stopped\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tag := newTag()
			stdout, stderr, code := rmarun(t, nil, "-H", "localhost,127.0.0.2,127.0.0.3:2", "--launcher-exec", fakeSSH(t),
				childBin, tag, "ignoreterm@1", "ready", tc.fail, "sleep")
			if code != tc.code || stderr != tc.want {
				t.Errorf("exit status %d, stderr:\n%s\nwant %d and %q", code, stderr, tc.code, tc.want)
			}
			byRank(t, stdout)
			checkNoneLeft(t, tag)
		})
	}
}

// The first failure is named, not the first one rmarun hears of: when a
// rank exits, its peers fail in turn as they lose it.
func TestFirstFailureNamed(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
		code int
	}{
		{"local", []string{"-n", "4", childBin, "init", "exit=3@2", "barrier", "sleep"},
			"rmarun: rank 2 exited with status 3; the job was stopped\n", 3},
		{"killed", []string{"-n", "6", childBin, "init", "kill@3", "barrier", "sleep"},
			"rmarun: rank 3 was killed by signal 9 (killed); the job was stopped\n", 1},
		{"remote", []string{"-H", "127.0.0.2:4", "--launcher-exec", fakeSSH(t), childBin, "init", "exit=3@2", "barrier", "sleep"},
			"rmarun: rank 2 exited with status 3 on host 127.0.0.2; the job was stopped\n", 3},
		{"across hosts", []string{"-H", "127.0.0.2:3,127.0.0.3", "--launcher-exec", fakeSSH(t), childBin, "init", "kill@3", "barrier", "sleep"},
			"rmarun: rank 3 was killed by signal 9 (killed) on host 127.0.0.3; the job was stopped\n", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 4 {
				_, stderr, code := rmarun(t, nil, append([]string{"-provider", "soft"}, tc.args...)...)
				if code != tc.code || !endsWithOnly(stderr, tc.want) {
					t.Fatalf("exit status %d, stderr:\n%s\nwant %d and %q", code, stderr, tc.code, tc.want)
				}
			}
		})
	}
}

// A rank that ends without calling rma.Init stops the job at once, rather
// than leaving the others waiting for it in rma.Init.
func TestRankNeverCallsInit(t *testing.T) {
	_, stderr, code := rmarun(t, nil, "-startup-timeout", "10m", "-n", "3", "-provider", "soft", childBin, "exit=0@1", "init", "barrier")
	want := "rmarun: rank 1 exited with status 0 without calling rma.Init, which the other ranks called; the job was stopped\n"
	if code != 1 || !endsWithOnly(stderr, want) {
		t.Errorf("exit status %d, stderr:\n%s\nwant 1 and %q", code, stderr, want)
	}
}

// A rank that never calls rma.Init is named when the start-up bound
// expires.
func TestStartupTimeout(t *testing.T) {
	tag := newTag()
	_, stderr, code := rmarun(t, nil, "-startup-timeout", "300ms", "-n", "3", "-provider", "soft", childBin, tag, "sleep@1", "init", "barrier")
	// Rank 1 is named; on a loaded machine another rank may not have
	// reached rma.Init yet either, and is named too.
	want := regexp.MustCompile(`(?m)^rmarun: (rank 1|ranks [0-9, ]*\b1\b[0-9, ]*) did not call rma.Init within 300ms of the first rank \(-startup-timeout\); the job was stopped\n\z`)
	if code != 1 || !want.MatchString(stderr) || strings.Count(stderr, "rmarun:") != 1 {
		t.Errorf("exit status %d, stderr:\n%s\nwant 1 and %v", code, stderr, want)
	}
	checkNoneLeft(t, tag)
}

// A host the launcher cannot reach fails the job, naming the host, before
// any rank starts.
func TestHostDown(t *testing.T) {
	tag := newTag()
	_, stderr, code := rmarun(t, []string{"FAKESSH_DOWN=127.0.0.3"}, "-H", "localhost,127.0.0.2,127.0.0.3", "--launcher-exec", fakeSSH(t),
		childBin, tag, "ready", "sleep")
	for _, want := range []string{
		"rmarun: host 127.0.0.3: ssh: connect to host 127.0.0.3 port 22: Connection refused\n",
		"rmarun: host 127.0.0.3: the rmarun agent did not start (exit status 255)\n",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, stderr)
		}
	}
	if code != 1 {
		t.Errorf("exit status %d, want 1", code)
	}
	checkNoneLeft(t, tag)
}

// The rmarun agent stops its host's ranks when its connection to rmarun
// closes: here rmarun is killed outright, and the stand-in for ssh leaves
// the agent running, as a dropped ssh connection does.
func TestLauncherKilled(t *testing.T) {
	tag := newTag()
	cmd := command(t, "-H", "127.0.0.2,127.0.0.3", "--launcher-exec", fakeSSH(t), childBin, tag, "ignoreterm@1", "ready", "sleep")
	cmd.Env = append(cmd.Env, "FAKESSH_NOEXEC=1")
	waitReady(t, cmd, 2)
	cmd.Process.Kill()
	cmd.Wait()
	// The agents notice at once, but stopping takes its grace period for
	// rank 1, which ignores SIGTERM. Bounded by the test's deadline.
	for len(procsWith(tag))+len(agents()) > 0 {
		time.Sleep(50 * time.Millisecond)
	}
}

// SIGTERM to rmarun reaches the ranks on every host.
func TestSignalForwardedRemote(t *testing.T) {
	tag := newTag()
	cmd := command(t, "-H", "localhost,127.0.0.2,127.0.0.3", "--launcher-exec", fakeSSH(t), childBin, tag, "ready", "sleep")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	waitReady(t, cmd, 3)
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 128+int(syscall.SIGTERM) || stderr.String() != "rmarun: received terminated; the job was stopped\n" {
		t.Errorf("exit status %d, stderr:\n%s", code, stderr.String())
	}
	checkNoneLeft(t, tag)
}

// waitReady starts cmd and returns once n ranks have printed "ready".
func waitReady(t *testing.T, cmd interface {
	StdoutPipe() (io.ReadCloser, error)
	Start() error
}, n int) {
	t.Helper()
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(pipe)
	for ready := 0; ready < n; {
		if !sc.Scan() {
			t.Fatalf("output ended before %d ranks were ready", n)
		}
		if strings.Contains(sc.Text(), "ready") {
			ready++
		}
	}
	go io.Copy(io.Discard, pipe)
}

func TestOversubscribe(t *testing.T) {
	_, stderr, code := rmarun(t, nil, "-H", "localhost:2", "-n", "3", childBin)
	if code != 2 || !strings.Contains(stderr, "rmarun: 3 ranks do not fit in the 2 slots of the hosts") {
		t.Errorf("exit status %d, stderr:\n%s", code, stderr)
	}
	stdout, stderr, code := rmarun(t, nil, "-H", "localhost:2", "-np", "3", "--oversubscribe", childBin, "out=hi")
	if code != 0 || len(byRank(t, stdout)) != 3 {
		t.Errorf("--oversubscribe: exit status %d, output:\n%s%s", code, stdout, stderr)
	}
	// Without -n, a rank per slot.
	stdout, _, code = rmarun(t, nil, "-H", "localhost:2,localhost", childBin, "out=hi")
	if code != 0 || len(byRank(t, stdout)) != 3 {
		t.Errorf("-H localhost:2,localhost: exit status %d, output:\n%s", code, stdout)
	}
}

func TestRankCap(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "1025"}, "rmarun: -n 1025: at most 1024 ranks may run in a job"},
		{[]string{"-np", "257"}, "rmarun: -n 257: at most 256 ranks may run on one host"},
		{[]string{"-n", "300", "-H", "localhost:300"}, "rmarun: 300 ranks on host localhost: at most 256 ranks may run on one host"},
	} {
		_, stderr, code := rmarun(t, nil, append(tc.args, childBin)...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("rmarun %q: exit status %d, stderr:\n%s\nwant 2 and %q", tc.args, code, stderr, tc.want)
		}
	}
}

func TestTagOutput(t *testing.T) {
	stdout, stderr, code := rmarun(t, nil, "-quiet-prefix", "--tag-output", "-np", "2", childBin, "out=hello")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	for rank, lines := range byRank(t, stdout) {
		if !slices.Equal(lines, []string{"hello"}) {
			t.Errorf("rank %d: %q", rank, lines)
		}
	}
}

func TestXUnset(t *testing.T) {
	_, stderr, code := rmarun(t, nil, "-x", "RMARUN_TEST_UNSET_VARIABLE", childBin)
	if code != 2 || !strings.Contains(stderr, "rmarun: -x RMARUN_TEST_UNSET_VARIABLE: RMARUN_TEST_UNSET_VARIABLE is not set") {
		t.Errorf("exit status %d, stderr:\n%s", code, stderr)
	}
}

// A host whose launcher never starts the agent (ssh waiting for a
// password, say) is named when the start-up bound expires, and the
// launcher processes are killed.
func TestHostHangs(t *testing.T) {
	_, stderr, code := rmarun(t, []string{"FAKESSH_HANG=127.0.0.3"}, "-startup-timeout", "300ms", "-H", "127.0.0.2,127.0.0.3", "--launcher-exec", fakeSSH(t), childBin)
	// On a loaded machine the other host's agent may be late too, and named.
	want := regexp.MustCompile(`^rmarun: host (127\.0\.0\.2, )?127\.0\.0\.3: the rmarun agent did not start within 300ms \(-startup-timeout\)\n\z`)
	if code != 1 || !want.MatchString(stderr) {
		t.Errorf("exit status %d, stderr:\n%s\nwant 1 and %v", code, stderr, want)
	}
	if left := slices.Concat(procsWith("3601"), agents()); len(left) > 0 {
		t.Errorf("processes left behind:\n%s", strings.Join(left, "\n"))
	}
}

// endsWithOnly reports whether stderr ends with rmarun's message want, and
// has no other message of rmarun's: the lines before it are the ranks'
// (some print an error as they lose their peers).
func endsWithOnly(stderr, want string) bool {
	return strings.HasSuffix(stderr, want) && strings.Count(stderr, "rmarun:") == 1
}

// In a job on several hosts, this host's ranks may not listen on loopback.
func TestLoopbackRefused(t *testing.T) {
	_, stderr, code := rmarun(t, nil, "-addr", "127.0.0.1", "-H", "localhost,192.0.2.7", "--launcher-exec", fakeSSH(t), childBin)
	want := "rmarun: the ranks on this host would listen on 127.0.0.1, which the other hosts cannot reach\n"
	if code != 1 || stderr != want {
		t.Errorf("exit status %d, stderr:\n%s\nwant 1 and %q", code, stderr, want)
	}
}

// A job from a host file: slots place the ranks, addr= sets a host's
// address, and -iface the others'.
func TestHostfileJob(t *testing.T) {
	path := filepath.Join(t.TempDir(), "hosts")
	text := "127.0.0.2 slots=2 addr=127.0.0.1 # rank 0's host\n127.0.0.3:1\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	stdout, stderr, code := rmarun(t, nil, "--hostfile", path, "-iface", "lo", "--launcher-exec", fakeSSH(t),
		childBin, "env", "getenv=FAKESSH_HOST")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	ranks := byRank(t, stdout)
	for rank, host := range []string{"127.0.0.2", "127.0.0.2", "127.0.0.3"} {
		e := envOf(ranks[rank])
		if e["FAKESSH_HOST"] != host || e["RMAGO_ADDR"] != "127.0.0.1" {
			t.Errorf("rank %d: host %q, RMAGO_ADDR=%q; want %s and 127.0.0.1", rank, e["FAKESSH_HOST"], e["RMAGO_ADDR"], host)
		}
	}
	if len(ranks) != 3 {
		t.Errorf("%d ranks, want 3 (a rank per slot)", len(ranks))
	}
}

// Without --launcher-exec, remote hosts are reached with "ssh -x HOST CMD"
// (here the stand-in, found first in PATH under the name ssh).
func TestDefaultLauncherIsSSH(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink(fakeSSH(t), filepath.Join(dir, "ssh")); err != nil {
		t.Fatal(err)
	}
	logf := filepath.Join(dir, "log")
	env := []string{"PATH=" + dir + ":" + os.Getenv("PATH"), "FAKESSH_LOG=" + logf}
	stdout, stderr, code := rmarun(t, env, "-H", "127.0.0.2", childBin, "getenv=FAKESSH_HOST")
	if code != 0 || stdout != "[0] FAKESSH_HOST=127.0.0.2\n" {
		t.Errorf("exit status %d, output:\n%s%s", code, stdout, stderr)
	}
	if b, _ := os.ReadFile(logf); string(b) != "127.0.0.2\n" {
		t.Errorf("ssh was run for %q, want 127.0.0.2", b)
	}
}
