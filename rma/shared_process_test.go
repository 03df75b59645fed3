package rma_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"github.com/rmago/rmago/internal/launch"
	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/rma/rmatest"
)

const leftoversEnv = "RMAGO_TEST_LEFTOVERS"

// TestSharedNothingLeft runs two ranks of a shared window on the shm
// provider as processes it starts itself (no launcher, so that one can be
// killed while the other lives on): after Free, and after the survivor's
// Free once its peer was killed with SIGKILL, neither rank's segment is
// mapped in the survivor's /proc/self/maps, and after Close no shared
// memory at all (TestSharedLeftoversRank checks); every rank exits, and
// /dev/shm is as it was.
func TestSharedNothingLeft(t *testing.T) {
	if testing.Short() || rmatest.InProcesses() {
		t.Skip("in -short mode, or already a rank")
	}
	before := devShmNames(t)
	for _, mode := range []string{"free", "kill"} {
		t.Run(mode, func(t *testing.T) { runLeftovers(t, mode) })
	}
	if after := devShmNames(t); after != before {
		t.Fatalf("/dev/shm changed: %q, was %q", after, before)
	}
}

func runLeftovers(t *testing.T, mode string) {
	port, err := launch.FreePort(launch.DefaultAddr)
	if err != nil {
		t.Fatal(err)
	}
	secret, err := launch.NewSecret()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var cmds [2]*exec.Cmd
	var outs [2]*bufio.Scanner
	for r := range cmds {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run", "^TestSharedLeftoversRank$", "-test.v", "-test.count=1")
		cmd.Env = append(os.Environ(), leftoversEnv+"="+mode, "RMAGO_PROVIDER=shm", "RMAGO_TIMEOUT=20s",
			launch.EnvRank+"="+strconv.Itoa(r), launch.EnvSize+"=2", launch.EnvSecret+"="+secret,
			launch.EnvRendezvous+"="+net.JoinHostPort(launch.DefaultAddr, strconv.Itoa(port)))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds[r], outs[r] = cmd, bufio.NewScanner(out)
	}
	defer func() {
		for _, c := range cmds {
			c.Process.Kill()
			c.Wait()
		}
	}()
	// upTo reads rank r's output up to a line starting with want.
	upTo := func(r int, want string) string {
		var seen []string
		for outs[r].Scan() {
			l := outs[r].Text()
			seen = append(seen, l)
			if strings.HasPrefix(l, want) {
				return l
			}
		}
		t.Fatalf("rank %d ended without %q:\n%s", r, want, strings.Join(seen, "\n"))
		return ""
	}
	if mode == "kill" {
		upTo(1, "MAPPED")
		cmds[1].Process.Kill() // SIGKILL
	}
	upTo(0, "LEFTOVERS-OK")
	if mode == "free" {
		upTo(1, "LEFTOVERS-OK")
	}
	for r, c := range cmds {
		for outs[r].Scan() {
		}
		err := c.Wait()
		if mode == "kill" && r == 1 {
			continue
		}
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
}

// TestSharedLeftoversRank is one rank of TestSharedNothingLeft.
func TestSharedLeftoversRank(t *testing.T) {
	mode := os.Getenv(leftoversEnv)
	if mode == "" {
		t.Skip("run by TestSharedNothingLeft")
	}
	w, err := rma.Init()
	if err != nil {
		t.Fatal(err)
	}
	me, peer := w.Rank(), 1-w.Rank()
	win, err := rma.AllocateShared[int64](w, 1<<12)
	if err != nil {
		t.Fatal(err)
	}
	win.Local()[0] = int64(me + 1)
	seg, err := win.SharedSegment(peer)
	if err != nil {
		t.Fatal(err)
	}
	own, theirs := addrOf(win.Local()), addrOf(seg)
	if !mappedAt(t, theirs) {
		t.Fatalf("rank %d: the peer's segment at %#x is not in /proc/self/maps", me, theirs)
	}
	if err := win.Fence(0); err != nil {
		t.Fatal(err)
	}
	win.Sync()
	if seg[0] != int64(peer+1) {
		t.Fatalf("rank %d: the peer's element 0 = %d, want %d", me, seg[0], peer+1)
	}
	fmt.Println("MAPPED", me)
	if mode == "kill" {
		if me == 1 {
			time.Sleep(time.Minute) // killed by the test
		}
		if err := win.Fence(0); !errors.Is(err, rma.ErrPeer) {
			t.Fatalf("fence with a killed peer: %v, want ErrPeer", err)
		}
	}
	err = win.Free()
	if mode == "free" && err != nil {
		t.Fatal(err)
	}
	for _, a := range []uintptr{own, theirs} {
		if mappedAt(t, a) {
			b, _ := os.ReadFile("/proc/self/maps")
			t.Fatalf("rank %d: %#x still mapped after Free (%s):\n%s", me, a, mode, b)
		}
	}
	w.Close() // fails after the peer was killed: it cannot say goodbye
	b, _ := os.ReadFile("/proc/self/maps")
	if n := strings.Count(string(b), "memfd:rmago"); n != 0 {
		t.Fatalf("rank %d: %d shared-memory mappings left after Close (%s):\n%s", me, n, mode, b)
	}
	fmt.Println("LEFTOVERS-OK", me)
}

func addrOf(s []int64) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(s))) }

// mappedAt reports whether /proc/self/maps has a mapping holding a.
func mappedAt(t *testing.T, a uintptr) bool {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	for l := range strings.Lines(string(b)) {
		var lo, hi uint64
		if _, err := fmt.Sscanf(l, "%x-%x", &lo, &hi); err == nil && uint64(a) >= lo && uint64(a) < hi {
			return true
		}
	}
	return false
}

func devShmNames(t *testing.T) string {
	es, err := os.ReadDir("/dev/shm")
	if err != nil {
		return ""
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return strings.Join(names, " ")
}
