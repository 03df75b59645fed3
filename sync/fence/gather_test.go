package fence

import (
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/sync/control/controltest"
)

// puts says whether rank s puts into rank t in epoch iter of n ranks:
// the patterns a fence must serve alike, gathered or all-to-all.
func puts(iter, s, t, n int) bool {
	if s == t {
		return false
	}
	switch iter % 7 {
	case 0: // a star out of rank 0 (one-to-many)
		return s == 0
	case 1: // and back into it
		return t == 0
	case 2: // a ring
		return t == (s+1)%n
	case 3: // all to all
		return true
	case 4: // nobody
		return false
	case 5: // a star into the last rank, which is not the root
		return t == n-1
	default: // one pair only, away from the root
		return s == 1 && t == 2
	}
}

// TestFenceForms: SyncTo over epochs of every pattern of puts (puts), each
// epoch also reading from a rank without waiting (the read completes in
// the fence: its flush list), under both forms of round one (RMAGO_FENCE
// all and gather). After each fence every rank finds every stamp put into
// it, the stamp it read, and, once Ready, the stamp a third rank put into
// its right neighbour (round two, lazy). Under gather the ranks agree on
// the gathered form unless a peer is reached at post (shm), where the
// fence stays all-to-all. From DisseminationMin ranks both run the flushes
// and the dissemination barrier (flushBarrier).
func TestFenceForms(t *testing.T) {
	for _, form := range []string{"all", "gather"} {
		for _, n := range []int{3, 4, 6, DisseminationMin, DisseminationMin + 1} {
			t.Run(fmt.Sprintf("%s/%d", form, n), func(t *testing.T) {
				t.Setenv(config.EnvFence, form)
				fenceForms(t, n, form)
			})
		}
	}
}

func fenceForms(t *testing.T, n int, form string) {
	shm := os.Getenv("RMAGO_PROVIDER") == "shm" || os.Getenv("RMAGO_TEST_NODES") != ""
	controltest.Run(t, n, controltest.Options{}, func(r *controltest.Rank) error {
		if want := form == "gather" && !shm; r.F.GatherFences() != want {
			return fmt.Errorf("GatherFences %v under RMAGO_FENCE=%s, want %v", r.F.GatherFences(), form, want)
		}
		x := New(r.F, 11)
		x.UseControl(r.C)
		me := r.Me()
		putTo := make([]bool, n)
		for iter := 1; iter <= 42; iter++ {
			for t := range n {
				putTo[t] = puts(iter, me, t, n)
				if putTo[t] {
					if err := r.Write(t, slot(me, iter), stageOff+16*t, val(iter, me)); err != nil {
						return err
					}
				}
			}
			// A read of the left neighbour's own stamp, set before the
			// last fence and not changed until the next.
			left := (me + n - 1) % n
			if _, err := r.F.Read(left, r.Local(stageOff+1024), r.At(left, own(iter)), 8); err != nil {
				return err
			}
			// This rank's own stamp, read by its right neighbour in the
			// next epoch.
			r.SetU64(own(iter+1), val(iter, me))
			if err := x.SyncTo([]int{left}, putTo); err != nil {
				return fmt.Errorf("epoch %d: %w", iter, err)
			}
			if iter > 1 {
				if got, want := r.U64(stageOff+1024), val(iter-1, left); got != want {
					return fmt.Errorf("epoch %d: read rank %d's own stamp %#x, want %#x", iter, left, got, want)
				}
			}
			for s := range n {
				if puts(iter, s, me, n) {
					if got, want := r.Load(slot(s, iter)), val(iter, s); got != want {
						return fmt.Errorf("epoch %d: rank %d's stamp %#x, want %#x", iter, s, got, want)
					}
				}
			}
			right := (me + 1) % n
			for s := range n {
				if s == me || s == right || !puts(iter, s, right, n) {
					continue
				}
				if _, err := x.Ready(right); err != nil {
					return err
				}
				if err := r.Read(right, slot(s, iter), stageOff+1032, 8); err != nil {
					return err
				}
				if got, want := r.U64(stageOff+1032), val(iter, s); got != want {
					return fmt.Errorf("epoch %d: read rank %d's stamp at rank %d after the fence: %#x, want %#x", iter, s, right, got, want)
				}
				break
			}
		}
		_, err := x.Settle()
		return err
	})
}

// own is where a rank keeps its own stamp for epoch iter's read, clear of
// the slots: set before the fence that opens that epoch, two alternating,
// since the next one is set while the neighbour may still read this one.
func own(iter int) int { return 2048 + 8*(iter%2) }

// TestGatheredDeadPeer: a rank that closes its fabric instead of entering
// a gathered fence, the root or another, ends every survivor's fence with an
// error (ErrPeer or ErrTimeout) that names it, not a hang: the root tells
// the ranks waiting for it which rank left (transport's leftMidFence).
func TestGatheredDeadPeer(t *testing.T) {
	t.Setenv(config.EnvFence, "gather")
	for _, dead := range []int{0, 2} {
		t.Run(fmt.Sprintf("rank%d", dead), func(t *testing.T) { deadPeerNamed(t, 4, dead) })
	}
}

// TestFlushBarrierDeadPeer is TestGatheredDeadPeer from DisseminationMin
// ranks (flushBarrier): the rank waiting for the dead one's note tells the
// others (transport's leftMidFence), whose steps wait for ranks stuck on
// it.
func TestFlushBarrierDeadPeer(t *testing.T) {
	for _, dead := range []int{0, 4, 5} {
		t.Run(fmt.Sprintf("rank%d", dead), func(t *testing.T) { deadPeerNamed(t, DisseminationMin, dead) })
	}
}

func deadPeerNamed(t *testing.T, n, dead int) {
	const timeout = 2 * time.Second
	var survivors sync.WaitGroup
	survivors.Add(n - 1)
	controltest.Run(t, n, controltest.Options{Timeout: timeout, NoBarrier: true}, func(r *controltest.Rank) error {
		if r.Me() != dead {
			// Even if this rank fails early: the others wait for it.
			defer func() { survivors.Done(); survivors.Wait() }()
		}
		x := New(r.F, 12)
		x.UseControl(r.C)
		putTo := make([]bool, n)
		putTo[(r.Me()+1)%n] = true
		start := time.Now()
		err := x.SyncTo(nil, putTo)
		if err == nil {
			_, err = x.Settle()
		}
		if err == nil {
			// A rank still here when the dead one, past it, leaves
			// the next fence fails here: the others report the dead
			// one as failed (transport's leftMidFence), and a
			// notification wait fails on a failed rank even after its
			// note. Its error must name the dead rank all the same.
			err = r.F.Barrier()
		}
		if r.Me() == dead {
			if err != nil {
				return err
			}
			return r.F.Close()
		}
		if err == nil {
			start = time.Now()
			err = x.SyncTo(nil, putTo)
		}
		if err := survivorErr(err, start, timeout); err != nil {
			return err
		}
		if !strings.Contains(err.Error(), fmt.Sprint("rank ", dead, " ")) {
			return fmt.Errorf("the error does not name rank %d: %v", dead, err)
		}
		return nil
	})
}
