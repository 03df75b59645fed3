package shm

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/internal/memfd"
	"github.com/rmago/rmago/verbs"
)

// Tests across real processes: the test binary re-executes itself as a
// child (TestShmChild, selected by the environment) that serves its memory
// (server) or hammers the parent's (client).

const childEnv = "RMAGO_TEST_SHM_CHILD"

// TestShmChild is the child's body; it does nothing in a normal run.
func TestShmChild(t *testing.T) {
	switch os.Getenv(childEnv) {
	case "server":
		childServer(t)
	case "client":
		childClient(t)
	case "acc":
		childAcc(t)
	default:
		t.Skip("child process only")
	}
}

// childServer opens a context with a memfd region and a Go-memory region,
// accepts every connection with a new queue pair, prints where they are,
// and runs until its stdin closes.
func childServer(t *testing.T) {
	ctx, err := verbs.Open(Name, "", testConfig(secret))
	if err != nil {
		t.Fatal(err)
	}
	pd, _ := ctx.AllocPD()
	mem, err := memfd.Alloc(1<<16, "rmago-child")
	if err != nil {
		t.Fatal(err)
	}
	mr, err := pd.RegMR(mem.Bytes(), verbs.AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	goBuf := make([]byte, 1<<16)
	var pin runtime.Pinner
	pin.Pin(&goBuf[0])
	goMR, err := pd.RegMR(goBuf, verbs.AccessAll)
	if err != nil {
		t.Fatal(err)
	}
	cq, _ := ctx.CreateCQ(4096)
	ctx.(verbs.ConnManager).Accept(func(req verbs.ConnRequest) {
		q, err := pd.CreateQP(verbs.QPAttr{SendCQ: cq, RecvCQ: cq, MaxSendWR: 64, MaxRecvWR: 16})
		if err != nil {
			req.Refuse(err)
			return
		}
		for range 16 {
			q.PostRecv(&verbs.RecvWR{})
		}
		req.Accept(q)
	})
	fmt.Printf("READY %s %d %d %d %d\n", ctx.(verbs.ConnManager).ListenEndpoint().Addr, mr.RKey(), mr.Addr(), goMR.RKey(), goMR.Addr())
	bufio.NewReader(os.Stdin).ReadString('\n')
	ctx.Close()
	pin.Unpin()
}

// childClient connects to the endpoint in its environment and adds 1 n
// times to the word at addr with fetch-and-add, and n times to the next
// word with compare-and-swap loops.
func childClient(t *testing.T) {
	env := strings.Fields(os.Getenv("RMAGO_TEST_SHM_TARGET"))
	rkey, _ := strconv.ParseUint(env[1], 10, 32)
	addr, _ := strconv.ParseUint(env[2], 10, 64)
	n, _ := strconv.Atoi(env[3])
	s := newSide(t, 4096)
	if err := s.ctx.(verbs.ConnManager).Dial(s.qp, verbs.Endpoint{Addr: env[0]}, 1); err != nil {
		t.Fatal(err)
	}
	if err := hammer(s, uint32(rkey), addr, n); err != nil {
		t.Fatal(err)
	}
}

// hammer adds 1 n times to the word at addr (fetch-and-add) and n times to
// the next (compare-and-swap loops).
func hammer(s *side, rkey uint32, addr uint64, n int) error {
	var wc [1]verbs.WC
	run := func(wr *verbs.SendWR) (uint64, error) {
		wr.Flags = verbs.Signaled
		wr.SGL = sge(s.mr, 0, 8)
		if _, err := s.qp.PostSend(wr); err != nil {
			return 0, err
		}
		if k, err := s.sendCQ.Wait(wc[:], time.Now().Add(testTimeout)); err != nil || k != 1 || wc[0].Status != verbs.StatusSuccess {
			return 0, fmt.Errorf("completion %d %v %v", k, err, wc[0].Err())
		}
		s.ctx.(verbs.MemorySyncer).SyncMemory()
		return binary.LittleEndian.Uint64(s.buf), nil
	}
	for range n {
		if _, err := run(&verbs.SendWR{Op: verbs.OpFetchAdd, RemoteAddr: addr, RKey: rkey, CompareAdd: 1}); err != nil {
			return err
		}
	}
	guess := uint64(0)
	for i := 0; i < n; {
		old, err := run(&verbs.SendWR{Op: verbs.OpCompareSwap, RemoteAddr: addr + 8, RKey: rkey, CompareAdd: guess, Swap: guess + 1})
		if err != nil {
			return err
		}
		if old == guess {
			i++
			guess++
		} else {
			guess = old
		}
	}
	return nil
}

// child is a started server child.
type child struct {
	cmd             *exec.Cmd
	stdin           interface{ Close() error }
	addr            string
	rkey, goRKey    uint32
	memAddr, goAddr uint64
}

func startServer(t *testing.T) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestShmChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"=server")
	cmd.Stderr = os.Stderr
	in, _ := cmd.StdinPipe()
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{cmd: cmd, stdin: in}
	t.Cleanup(func() { in.Close(); cmd.Process.Kill(); cmd.Wait() })
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("child: %v", err)
	}
	var rk, grk uint32
	if _, err := fmt.Sscanf(line, "READY %s %d %d %d %d", &c.addr, &rk, &c.memAddr, &grk, &c.goAddr); err != nil {
		t.Fatalf("child said %q: %v", line, err)
	}
	c.rkey, c.goRKey = rk, grk
	return c
}

func dialChild(t *testing.T, c *child) *side {
	t.Helper()
	s := newSide(t, 1<<16)
	if err := s.ctx.(verbs.ConnManager).Dial(s.qp, verbs.Endpoint{Addr: c.addr}, 7); err != nil {
		t.Fatal(err)
	}
	return s
}

// The data path and the NIC's checks between processes, on both kinds of
// the child's memory.
func TestProcessesDataPath(t *testing.T) {
	t.Run("process_vm", testProcessesDataPath)
	t.Run("socket", func(t *testing.T) {
		t.Setenv(config.EnvShmCMA, "off") // as where cross-memory attach is refused
		testProcessesDataPath(t)
	})
}

func testProcessesDataPath(t *testing.T) {
	c := startServer(t)
	s := dialChild(t, c)
	for _, kind := range []struct {
		name string
		rkey uint32
		addr uint64
	}{{"memfd", c.rkey, c.memAddr}, {"created", c.goRKey, c.goAddr}} {
		for i := range 8192 {
			s.buf[i] = byte(i*31 + len(kind.name))
		}
		if wc := post(t, s, &verbs.SendWR{Op: verbs.OpWrite, SGL: sge(s.mr, 0, 8192), RemoteAddr: kind.addr + 1000, RKey: kind.rkey}); wc.Status != verbs.StatusSuccess {
			t.Fatalf("%s: write: %v", kind.name, wc.Err())
		}
		if wc := post(t, s, &verbs.SendWR{Op: verbs.OpRead, SGL: sge(s.mr, 16384, 8192), RemoteAddr: kind.addr + 1000, RKey: kind.rkey}); wc.Status != verbs.StatusSuccess {
			t.Fatalf("%s: read: %v", kind.name, wc.Err())
		}
		if string(s.buf[16384:16384+8192]) != string(s.buf[:8192]) {
			t.Fatalf("%s: read back differs from what was written", kind.name)
		}
		if err := hammer(s, kind.rkey, kind.addr+40000, 10); err != nil {
			t.Fatalf("%s: %v", kind.name, err)
		}
		post(t, s, &verbs.SendWR{Op: verbs.OpRead, SGL: sge(s.mr, 100, 16), RemoteAddr: kind.addr + 40000, RKey: kind.rkey})
		if a, b := binary.LittleEndian.Uint64(s.buf[100:]), binary.LittleEndian.Uint64(s.buf[108:]); a != 10 || b != 10 {
			t.Fatalf("%s: counters %d %d, want 10 10", kind.name, a, b)
		}
	}
	// Refusals, each on a new queue pair (a refusal fails its queue pair).
	for _, wr := range []verbs.SendWR{
		{Op: verbs.OpWrite, RemoteAddr: c.memAddr, RKey: c.rkey ^ 0x10000},
		{Op: verbs.OpWrite, RemoteAddr: c.memAddr + 1<<16 - 8, RKey: c.rkey},
		{Op: verbs.OpRead, RemoteAddr: c.goAddr + 1<<16 - 8, RKey: c.goRKey},
		{Op: verbs.OpFetchAdd, RemoteAddr: c.goAddr + 1<<16, RKey: c.goRKey},
	} {
		s := dialChild(t, c)
		wr.SGL = sge(s.mr, 0, 16)
		if wr.Op == verbs.OpFetchAdd {
			wr.SGL = sge(s.mr, 0, 8)
		}
		if wc := post(t, s, &wr); !errors.Is(wc.Err(), verbs.ErrRemoteAccess) {
			t.Fatalf("%v at %#x: %v, want a remote access error", wr.Op, wr.RemoteAddr, wc.Err())
		}
		if _, err := s.qp.PostSend(&verbs.SendWR{Op: verbs.OpWrite}); !errors.Is(err, verbs.ErrQPState) {
			t.Fatalf("post after a refusal: %v", err)
		}
	}
}

// Two processes and this one add to the same words at once, on memfd
// memory and on created memory: the counts are exact.
func TestProcessesConcurrentAtomics(t *testing.T) {
	const n = 500
	for _, kind := range []string{"memfd", "created"} {
		t.Run(kind, func(t *testing.T) {
			owner := newSide(t, 4096)
			var mu sync.Mutex
			var extra []verbs.QP
			cm := owner.ctx.(verbs.ConnManager)
			cm.Accept(func(req verbs.ConnRequest) {
				q, err := owner.pd.CreateQP(verbs.QPAttr{SendCQ: owner.sendCQ, RecvCQ: owner.recvCQ, MaxSendWR: 64, MaxRecvWR: 4})
				if err != nil {
					req.Refuse(err)
					return
				}
				mu.Lock()
				extra = append(extra, q)
				mu.Unlock()
				req.Accept(q)
			})
			mr := owner.mr
			if kind == "created" {
				mr = owner.goMR
			}
			target := fmt.Sprintf("%s %d %d %d", cm.ListenEndpoint().Addr, mr.RKey(), mr.Addr()+64, n)
			var cmds []*exec.Cmd
			for range 2 {
				cmd := exec.Command(os.Args[0], "-test.run", "^TestShmChild$", "-test.count=1")
				cmd.Env = append(os.Environ(), childEnv+"=client", "RMAGO_TEST_SHM_TARGET="+target)
				cmd.Stderr, cmd.Stdout = os.Stderr, os.Stderr
				if err := cmd.Start(); err != nil {
					t.Fatal(err)
				}
				cmds = append(cmds, cmd)
			}
			// This process joins in through a loopback pair.
			self := newSide(t, 4096)
			_ = self
			lq, err := owner.pd.CreateQP(verbs.QPAttr{SendCQ: owner.sendCQ, RecvCQ: owner.recvCQ, MaxSendWR: 64, MaxRecvWR: 4})
			if err != nil {
				t.Fatal(err)
			}
			if err := lq.Connect(owner.qp.Endpoint()); err != nil {
				t.Fatal(err)
			}
			loop := &side{ctx: owner.ctx, pd: owner.pd, mem: owner.mem, buf: owner.buf[2048:], mr: owner.mr, qp: lq, sendCQ: owner.sendCQ}
			loop.mr = subMR{owner.mr, 2048}
			if err := hammer(loop, mr.RKey(), mr.Addr()+64, n); err != nil {
				t.Fatal(err)
			}
			for _, cmd := range cmds {
				if err := cmd.Wait(); err != nil {
					t.Fatalf("client: %v", err)
				}
			}
			owner.ctx.(verbs.MemorySyncer).SyncMemory()
			buf := owner.buf
			if kind == "created" {
				buf = owner.goBuf
			}
			if a, b := binary.LittleEndian.Uint64(buf[64:]), binary.LittleEndian.Uint64(buf[72:]); a != 3*n || b != 3*n {
				t.Fatalf("counters %d (fetch-add) %d (compare-swap), want %d", a, b, 3*n)
			}
		})
	}
}

// subMR is a region seen from an offset, so that a second user of a
// side's memory takes its atomics' results elsewhere.
type subMR struct {
	verbs.MR
	off uint64
}

func (m subMR) Addr() uint64 { return m.MR.Addr() + m.off }

// A peer killed with SIGKILL fails the queue pair at once with an error
// naming it; nothing of it stays mapped once this side closes, and
// nothing is left in /dev/shm.
func TestProcessesKilledPeer(t *testing.T) {
	shmBefore := devShm(t)
	c := startServer(t)
	s := dialChild(t, c)
	if wc := post(t, s, &verbs.SendWR{Op: verbs.OpWrite, SGL: sge(s.mr, 0, 64), RemoteAddr: c.memAddr, RKey: c.rkey}); wc.Status != verbs.StatusSuccess {
		t.Fatal(wc.Err())
	}
	if n := mapsWith(t, "rmago-child"); n == 0 {
		t.Fatal("the child's memory is not mapped here: the write did not go through shared memory")
	}
	if _, err := s.qp.PostRecv(&verbs.RecvWR{ID: 9}); err != nil {
		t.Fatal(err)
	}
	pid := c.cmd.Process.Pid
	c.cmd.Process.Signal(syscall.SIGKILL)
	c.cmd.Wait()
	wc := waitWC(t, s.recvCQ)
	if wc.ID != 9 || wc.Status != verbs.StatusFlushed {
		t.Fatalf("receive after the peer was killed: %+v", wc)
	}
	err := s.qp.(verbs.ErrorReporter).Err()
	if !errors.Is(err, verbs.ErrTransport) || !strings.Contains(err.Error(), fmt.Sprintf("pid %d", pid)) {
		t.Fatalf("cause %v: want a transport error naming pid %d", err, pid)
	}
	if _, err := s.qp.PostSend(&verbs.SendWR{Op: verbs.OpWrite}); !errors.Is(err, verbs.ErrQPState) {
		t.Fatalf("post after the peer died: %v", err)
	}
	s.ctx.Close()
	if n := mapsWith(t, "rmago-child"); n != 0 {
		t.Fatalf("%d mappings of the dead child's memory left after Close", n)
	}
	if n := mapsWith(t, "rmago-shm"); n != 0 {
		b, _ := os.ReadFile("/proc/self/maps")
		t.Fatalf("%d mappings of shm provider segments left after Close:\n%s", n, b)
	}
	if after := devShm(t); after != shmBefore {
		t.Fatalf("/dev/shm changed: %q, was %q", after, shmBefore)
	}
}

func mapsWith(t *testing.T, s string) int {
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Fatal(err)
	}
	return strings.Count(string(b), s)
}

func devShm(t *testing.T) string {
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
