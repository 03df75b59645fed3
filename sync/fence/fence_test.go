package fence

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/sync/control/controltest"
	"github.com/rmago/rmago/transport"
)

const stageOff = controltest.StageOff

func val(iter, r int) uint64 { return uint64(iter)<<20 | uint64(r) + 1 }

// slot is where rank r puts its stamp of epoch iter: two slots per rank,
// alternating, since a rank may put its next epoch's stamp while its
// target still checks this one (it cannot be two fences ahead).
func slot(r, iter int) int { return 8 * (2*r + iter%2) }

// TestFenceDelivers: in every epoch each rank puts its stamp into its slot
// (slot) of its right neighbour (and, every third epoch, puts nothing); after the
// fence each rank finds its left neighbour's stamp in its own memory (round
// one) and reads, from the rank two to its right, the stamp its right
// neighbour put there (round two: every rank has its puts before anyone
// reads). Job sizes cover two ranks (one round), the all-to-all second
// round and the dissemination barrier (DisseminationMin and above, with a
// size that is not a power of two). With control words (words), ranks
// whose provider completes requests at post (shm) leave their notes in
// each other's words (direct.go): the test checks that they did.
func TestFenceDelivers(t *testing.T) {
	for _, words := range []bool{false, true} {
		for _, n := range []int{2, 3, 5, DisseminationMin, DisseminationMin + 3} {
			t.Run(fmt.Sprintf("words=%v/%d", words, n), func(t *testing.T) { fenceDelivers(t, n, words) })
		}
	}
}

func fenceDelivers(t *testing.T, n int, words bool) {
	controltest.Run(t, n, controltest.Options{}, func(r *controltest.Rank) error {
		x := New(r.F, 7)
		if words {
			x.UseControl(r.C)
		}
		me := r.Me()
		right, left, far := (me+1)%n, (me+n-1)%n, (me+2)%n
		var flush []int
		for iter := 1; iter <= 30; iter++ {
			put := iter%3 != 0 || me != 0 // epochs where some ranks put nothing
			if put {
				if err := r.Write(right, slot(me, iter), stageOff, val(iter, me)); err != nil {
					return err
				}
			}
			if err := x.Sync(flush, put); err != nil {
				return fmt.Errorf("epoch %d: %w", iter, err)
			}
			flush = flush[:0]
			if words && r.F.CompletesAtPost(left) {
				w := r.C.Load(control.NoteWord(n, left, control.NoteFence+iter%2))
				if got := w >> 1; got != uint64(iter) {
					return fmt.Errorf("epoch %d: rank %d's round-one note in the words is of fence %d", iter, left, got)
				}
			}
			if left != me && (left != 0 || iter%3 != 0) {
				if got, want := r.Load(slot(left, iter)), val(iter, left); got != want {
					return fmt.Errorf("epoch %d: rank %d's stamp %#x, want %#x", iter, left, got, want)
				}
			}
			if n < 3 || (right == 0 && iter%3 == 0) {
				continue
			}
			// Rank right put into rank far; read it from there.
			if err := r.Read(far, slot(right, iter), stageOff+8, 8); err != nil {
				return err
			}
			if got, want := r.U64(stageOff+8), val(iter, right); got != want {
				return fmt.Errorf("epoch %d: read rank %d's stamp at rank %d after the fence: %#x, want %#x", iter, right, far, got, want)
			}
			flush = append(flush, far)
		}
		return nil
	})
}

// TestDisseminationDeadPeer: a rank that closes its fabric instead of
// entering the fence fails the dissemination barrier's waits with an
// error, not a hang; the survivors' errors wrap ErrPeer or ErrTimeout.
// With and without control words (direct notes on shm).
func TestDisseminationDeadPeer(t *testing.T) {
	for _, words := range []bool{false, true} {
		t.Run(fmt.Sprintf("words=%v", words), func(t *testing.T) { disseminationDeadPeer(t, words) })
	}
}

func disseminationDeadPeer(t *testing.T, words bool) {
	const n = DisseminationMin
	const timeout = 2 * time.Second
	var survivors sync.WaitGroup
	survivors.Add(n - 1)
	controltest.Run(t, n, controltest.Options{Timeout: timeout, NoBarrier: true}, func(r *controltest.Rank) error {
		x := New(r.F, 9)
		if words {
			x.UseControl(r.C)
		}
		if r.Me() == 3 {
			// Round one with a put, so that the second round runs; then
			// leave during it.
			if _, err := x.barrier(transport.MakeTag(transport.TagFence, 9, 1), control.NoteFence, true, nil); err != nil {
				return err
			}
			return r.F.Close()
		}
		defer func() { survivors.Done(); survivors.Wait() }()
		start := time.Now()
		return survivorErr(x.Sync(nil, false), start, timeout)
	})
}

// survivorErr checks the error of a survivor's fence with a rank gone: an
// error, of class ErrPeer or ErrTimeout, not long after the timeout.
func survivorErr(err error, start time.Time, timeout time.Duration) error {
	if err == nil {
		return errors.New("fence succeeded with a rank gone")
	}
	if !errors.Is(err, transport.ErrPeer) && !errors.Is(err, transport.ErrTimeout) {
		return fmt.Errorf("unexpected error %v", err)
	}
	if took := time.Since(start); took > timeout+30*time.Second {
		return fmt.Errorf("gave up after %v (timeout %v)", took, timeout)
	}
	return nil
}

// TestStepGrace: the graces of a dissemination's steps grow with the step
// and end at the full grace, so that the wait nearest a failed rank gives
// it up first.
func TestStepGrace(t *testing.T) {
	const g = 900 * time.Millisecond
	for _, steps := range []int{1, 3, 10} {
		prev := time.Duration(0)
		for step := 1; step <= steps; step++ {
			got := stepGrace(g, step, steps)
			if got <= prev || got > g {
				t.Errorf("steps %d: step %d grace %v after %v, want growing, at most %v", steps, step, got, prev, g)
			}
			prev = got
		}
		if prev != g {
			t.Errorf("steps %d: last step's grace %v, want %v", steps, prev, g)
		}
	}
}
