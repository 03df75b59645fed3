package soft

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// Tests of the sleeper (sleeper.go): the sockets live outside Go's network
// poller, and the reader goroutines still run the peers' requests when
// nobody polls.

// epollSets returns, for every epoll instance of this process, the
// descriptors registered in it (from /proc/self/fdinfo).
func epollSets(t *testing.T) map[int][]int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skip("no /proc/self/fd:", err)
	}
	sets := map[int][]int{}
	for _, ent := range ents {
		fd, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		if link, _ := os.Readlink("/proc/self/fd/" + ent.Name()); link != "anon_inode:[eventpoll]" {
			continue
		}
		info, err := os.ReadFile("/proc/self/fdinfo/" + ent.Name())
		if err != nil {
			continue
		}
		sets[fd] = []int{}
		for _, line := range strings.Split(string(info), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == "tfd:" {
				if n, err := strconv.Atoi(f[1]); err == nil {
					sets[fd] = append(sets[fd], n)
				}
			}
		}
	}
	return sets
}

// TestSocketsOutsideGoPoller: a connected queue pair's socket is in its
// context's own epoll set and in no other (Go's poller would wake a thread
// at every frame); the context's set is in Go's poller.
func TestSocketsOutsideGoPoller(t *testing.T) {
	t.Setenv("RMAGO_SOFT_SPIN", "100us")
	a, b := connected(t, 64)
	sets := epollSets(t)
	for name, s := range map[string]*side{"a": a, "b": b} {
		q := s.qp.(*qp)
		own := s.ctx.(*device).prog.sl.epfd
		for ep, fds := range sets {
			for _, fd := range fds {
				if fd == q.rx.fd && ep != own {
					t.Errorf("side %s: socket %d is in epoll set %d, not only in its context's (%d)", name, fd, ep, own)
				}
			}
		}
		found := false
		for _, fd := range sets[own] {
			found = found || fd == q.rx.fd
		}
		if !found {
			t.Errorf("side %s: socket %d is not in its context's epoll set %d (%v)", name, q.rx.fd, own, sets[own])
		}
		inGo := false
		for ep, fds := range sets {
			for _, fd := range fds {
				inGo = inGo || (ep != own && fd == own)
			}
		}
		if !inGo {
			t.Errorf("side %s: the context's epoll set %d is not in Go's poller", name, own)
		}
	}
}

// TestPassiveAfterPolling: a rank whose waiter has just found its
// completion (its sleeper pauses, expecting it to poll again) and then
// calls nothing still runs its peer's requests: the sleeper resumes on its
// own. Each round's write and read-back carry distinct data.
func TestPassiveAfterPolling(t *testing.T) {
	t.Setenv("RMAGO_SOFT_SPIN", "100us")
	a, b := connected(t, 4096)
	for round := range 20 {
		// a polls: its write to b completes in a's own Wait.
		a.buf[0] = byte(round)
		if _, err := a.qp.PostSend(&verbs.SendWR{ID: 1, Op: verbs.OpWrite, Flags: verbs.Signaled,
			SGL: a.sge(0, 1), RemoteAddr: b.mr.Addr() + 2048, RKey: b.mr.RKey()}); err != nil {
			t.Fatal(err)
		}
		if wc := waitOne(t, a.sendCQ); wc.Status != verbs.StatusSuccess {
			t.Fatalf("round %d: a's write: %+v", round, wc)
		}
		// Then a calls nothing: b's write to a and its read-back need a's
		// reader goroutine.
		src := bytes.Repeat([]byte{byte(round + 100)}, 512)
		copy(b.buf[:512], src)
		wr := &verbs.SendWR{ID: 2, Op: verbs.OpWrite, SGL: b.sge(0, 512), RemoteAddr: a.mr.Addr() + 1024, RKey: a.mr.RKey()}
		wr.Next = &verbs.SendWR{ID: 3, Op: verbs.OpRead, Flags: verbs.Signaled, SGL: b.sge(512, 512), RemoteAddr: a.mr.Addr() + 1024, RKey: a.mr.RKey()}
		if _, err := b.qp.PostSend(wr); err != nil {
			t.Fatal(err)
		}
		if wc := waitOne(t, b.sendCQ); wc.Status != verbs.StatusSuccess || wc.ID != 3 {
			t.Fatalf("round %d: b's read-back: %+v", round, wc)
		}
		if !bytes.Equal(b.buf[512:1024], src) || !bytes.Equal(a.buf[1024:1536], src) {
			t.Fatalf("round %d: data differs", round)
		}
		if b.buf[2048] != byte(round) {
			t.Fatalf("round %d: a's write left %d at b", round, b.buf[2048])
		}
	}
}
