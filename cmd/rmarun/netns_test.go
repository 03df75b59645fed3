//go:build linux

package main

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// netnsHosts makes a small cluster of network namespaces for the test:
// a bridge with address NET.254 here, and n namespaces PREFIX1..PREFIXn
// whose eth0 is NET.i. It returns NET and PREFIX, the form FAKESSH_NETNS
// takes, and removes everything when the test ends. The test is skipped
// unless it runs as root with ip(8).
func netnsHosts(t *testing.T, n int) (netPrefix, nsPrefix string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("network namespaces need root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("no ip command")
	}
	id := os.Getpid() % 10000
	netPrefix = fmt.Sprintf("10.79.%d", id%200+1)
	nsPrefix = fmt.Sprintf("rmrun%d-h", id)
	br := fmt.Sprintf("rmrbr%d", id)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	t.Cleanup(func() {
		for i := 1; i <= n; i++ {
			exec.Command("ip", "netns", "del", fmt.Sprintf("%s%d", nsPrefix, i)).Run()
		}
		exec.Command("ip", "link", "del", br).Run()
	})
	ip("link", "add", br, "type", "bridge")
	ip("addr", "add", netPrefix+".254/24", "dev", br)
	ip("link", "set", br, "up")
	for i := 1; i <= n; i++ {
		ns, veth := fmt.Sprintf("%s%d", nsPrefix, i), fmt.Sprintf("rmrv%d-%d", id, i)
		ip("netns", "add", ns)
		ip("link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns)
		ip("link", "set", veth, "master", br, "up")
		ip("-n", ns, "addr", "add", fmt.Sprintf("%s.%d/24", netPrefix, i), "dev", "eth0")
		ip("-n", ns, "link", "set", "eth0", "up")
		ip("-n", ns, "link", "set", "lo", "up")
	}
	return netPrefix, nsPrefix
}

// A job over three "hosts", network namespaces reached through the
// stand-in for ssh: every rank listens on its host's address, rank 0's
// rendezvous is on the first host, and the ranks meet and synchronise
// across the bridge. A failure on the third host stops the ranks on all.
func TestNetnsHosts(t *testing.T) {
	netPrefix, nsPrefix := netnsHosts(t, 3)
	env := []string{"FAKESSH_NETNS=" + netPrefix + " " + nsPrefix}
	hosts := fmt.Sprintf("%s.1:2,%s.2,%s.3", netPrefix, netPrefix, netPrefix)
	stdout, stderr, code := rmarun(t, env, "-H", hosts, "--launcher-exec", fakeSSH(t), "-provider", "soft",
		childBin, "env", "init", "barrier", "close", "out=done")
	if code != 0 {
		t.Fatalf("exit status %d, stderr:\n%s", code, stderr)
	}
	ranks := byRank(t, stdout)
	wantHost := []int{1, 1, 2, 3}
	for rank := range 4 {
		e := envOf(ranks[rank])
		if want := fmt.Sprintf("%s.%d", netPrefix, wantHost[rank]); e["RMAGO_ADDR"] != want {
			t.Errorf("rank %d: RMAGO_ADDR=%q, want %s", rank, e["RMAGO_ADDR"], want)
		}
		if host, _, _ := net.SplitHostPort(e["RMAGO_RENDEZVOUS"]); host != netPrefix+".1" {
			t.Errorf("rank %d: RMAGO_RENDEZVOUS=%q, want %s.1:PORT", rank, e["RMAGO_RENDEZVOUS"], netPrefix)
		}
		if l := ranks[rank]; len(l) == 0 || l[len(l)-1] != "done" {
			t.Errorf("rank %d did not finish: %q", rank, l)
		}
	}

	tag := newTag()
	_, stderr, code = rmarun(t, env, "-H", hosts, "--launcher-exec", fakeSSH(t), "-provider", "soft",
		childBin, tag, "init", "ready", "exit=4@3", "sleep")
	want := fmt.Sprintf("rmarun: rank 3 exited with status 4 on host %s.3; the job was stopped\n", netPrefix)
	if code != 4 || !endsWithOnly(stderr, want) {
		t.Errorf("exit status %d, stderr:\n%s\nwant 4 and %q", code, stderr, want)
	}
	checkNoneLeft(t, tag)
}
