package pscw

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

func val(iter, from int) uint64 { return uint64(iter)<<16 | uint64(from) }

// epoch runs one complete PSCW round on this rank: Post(exposure),
// Start(access), put val(iter, me) into slot 8*me of every target,
// Complete, then Wait (or a Test loop) and check that every origin's value
// arrived.
func epoch(r *rank, p *PSCW, iter int, exposure, access []int, useTest bool) error {
	me := r.Me()
	if err := p.Post(exposure); err != nil {
		return fmt.Errorf("iteration %d: post %v: %w", iter, exposure, err)
	}
	if err := p.Start(access); err != nil {
		return fmt.Errorf("iteration %d: start %v: %w", iter, access, err)
	}
	if err := write1(r, access, 8*me, stageOff, val(iter, me)); err != nil {
		return err
	}
	if err := p.Complete(); err != nil {
		return fmt.Errorf("iteration %d: complete: %w", iter, err)
	}
	if useTest {
		for {
			done, err := p.Test()
			if err != nil {
				return fmt.Errorf("iteration %d: test: %w", iter, err)
			}
			if done {
				break
			}
			runtime.Gosched()
		}
	} else if err := p.Wait(); err != nil {
		return fmt.Errorf("iteration %d: wait: %w", iter, err)
	}
	for _, o := range exposure {
		if got, want := r.U64(8*o), val(iter, o); got != want {
			return fmt.Errorf("iteration %d: slot of rank %d holds %#x, want %#x", iter, o, got, want)
		}
	}
	return nil
}

// write1 puts v (staged once at stage) to off in each target's data region.
func write1(r *rank, targets []int, off, stage int, v uint64) error {
	r.SetU64(stage, v)
	for _, t := range targets {
		if _, err := r.F.Write(t, r.Local(stage), r.At(t, off), 8); err != nil {
			return err
		}
	}
	return nil
}

// TestRing: each rank exposes to its left neighbour and accesses its right
// one, many times; each iteration's data is checked. Where the neighbours
// are notified directly (shm: direct.go), their counts in this rank's
// words must be the rounds'.
func TestRing(t *testing.T) {
	for _, n := range []int{1, 2, 3, 5, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			runJob(t, n, jobOpts{}, func(r *rank) error {
				p := New(r.C, 1)
				defer p.Close()
				left, right := (r.Me()+n-1)%n, (r.Me()+1)%n
				const rounds = 100
				for i := range rounds {
					if err := epoch(r, p, i, []int{left}, []int{right}, i%3 == 2); err != nil {
						return err
					}
				}
				if r.F.CompletesAtPost(right) {
					if got := r.C.Load(control.NoteWord(n, right, control.NotePost)); got != rounds {
						return fmt.Errorf("rank %d's posts counted in the words: %d, want %d", right, got, rounds)
					}
				}
				if r.F.CompletesAtPost(left) {
					if got := r.C.Load(control.NoteWord(n, left, control.NoteComplete)); got != rounds {
						return fmt.Errorf("rank %d's completions counted in the words: %d, want %d", left, got, rounds)
					}
				}
				return nil
			})
		})
	}
}

// TestStar: rank 0 exposes to everyone (itself included) and everyone
// accesses rank 0; then the other way round: rank 0 accesses everyone and
// the others expose to rank 0. Groups of size n and 1 alternate.
func TestStar(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			runJob(t, n, jobOpts{}, func(r *rank) error {
				p := New(r.C, 1)
				defer p.Close()
				all := make([]int, n)
				for i := range all {
					all[i] = i
				}
				none, zero := []int{}, []int{0}
				for i := range 30 {
					// In: everyone puts into rank 0.
					exp, acc := none, zero
					if r.Me() == 0 {
						exp = all
					}
					if err := epoch(r, p, 2*i, exp, acc, i%2 == 1); err != nil {
						return err
					}
					// Out: rank 0 puts into everyone.
					exp, acc = zero, none
					if r.Me() == 0 {
						exp, acc = zero, all
					}
					if err := epoch(r, p, 2*i+1, exp, acc, false); err != nil {
						return err
					}
				}
				return nil
			})
		})
	}
}

// TestRandomGroups: each iteration draws (with a seed every rank shares) a
// random set of origin→target pairs; a target exposes to its origins and an
// origin accesses its targets, in shuffled order.
func TestRandomGroups(t *testing.T) {
	const n, iters = 6, 40
	runJob(t, n, jobOpts{}, func(r *rank) error {
		p := New(r.C, 1)
		defer p.Close()
		me := r.Me()
		for i := range iters {
			rng := rand.New(rand.NewPCG(7, uint64(i)))
			var exp, acc []int
			for o := range n {
				for tg := range n {
					if rng.IntN(5) < 2 {
						if tg == me {
							exp = append(exp, o)
						}
						if o == me {
							acc = append(acc, tg)
						}
					}
				}
			}
			local := rand.New(rand.NewPCG(uint64(me), uint64(i)))
			local.Shuffle(len(exp), func(a, b int) { exp[a], exp[b] = exp[b], exp[a] })
			local.Shuffle(len(acc), func(a, b int) { acc[a], acc[b] = acc[b], acc[a] })
			if err := epoch(r, p, i, exp, acc, i%2 == 0); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestTest: Test reports false until the origin completes, then true once.
func TestTest(t *testing.T) {
	release := make(chan struct{})
	runJob(t, 2, jobOpts{}, func(r *rank) error {
		p := New(r.C, 1)
		defer p.Close()
		if r.Me() == 1 {
			if err := p.Start([]int{0}); err != nil {
				return err
			}
			if err := write1(r, []int{0}, 8, stageOff, 42); err != nil {
				return err
			}
			<-release
			return p.Complete()
		}
		if err := p.Post([]int{1}); err != nil {
			return err
		}
		time.Sleep(20 * time.Millisecond)
		for range 3 {
			if done, err := p.Test(); done || err != nil {
				close(release)
				return fmt.Errorf("Test before Complete = %v, %v", done, err)
			}
		}
		close(release)
		for {
			done, err := p.Test()
			if err != nil {
				return err
			}
			if done {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if got := r.U64(8); got != 42 {
			return fmt.Errorf("slot holds %d after Test, want 42", got)
		}
		return nil
	})
}

// TestClosed: after Close, every call fails with ErrClosed.
func TestClosed(t *testing.T) {
	runJob(t, 1, jobOpts{}, func(r *rank) error {
		p := New(r.C, 1)
		if err := p.Close(); err != nil {
			return err
		}
		_, testErr := p.Test()
		for _, err := range []error{p.Post(nil), p.Start(nil), p.Complete(), p.Wait(), testErr} {
			if !errors.Is(err, ErrClosed) {
				return fmt.Errorf("call after Close: %v, want ErrClosed", err)
			}
		}
		return nil
	})
}

// TestNoCheck: a PostNoCheck/StartNoCheck pair, ordered by a barrier,
// moves data like a checked one and leaves the counters in step.
func TestNoCheck(t *testing.T) {
	runJob(t, 3, jobOpts{}, func(r *rank) error {
		p := New(r.C, 1)
		defer p.Close()
		n := r.Size()
		left, right := (r.Me()+n-1)%n, (r.Me()+1)%n
		for i := range 10 {
			if i%2 == 0 {
				if err := p.PostNoCheck([]int{left}); err != nil {
					return err
				}
				if err := r.F.Barrier(); err != nil { // every post precedes every start
					return err
				}
				if err := p.StartNoCheck([]int{right}); err != nil {
					return err
				}
				if err := write1(r, []int{right}, 8*r.Me(), stageOff, val(i, r.Me())); err != nil {
					return err
				}
				if err := p.Complete(); err != nil {
					return err
				}
				if err := p.Wait(); err != nil {
					return err
				}
				if got, want := r.U64(8*left), val(i, left); got != want {
					return fmt.Errorf("iteration %d: %#x, want %#x", i, got, want)
				}
				continue
			}
			if err := epoch(r, p, i, []int{left}, []int{right}, false); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestDeadPeer: a rank closes its fabric instead of posting or completing;
// the ranks waiting for it fail within the fabric's timeout.
func TestDeadPeer(t *testing.T) {
	const timeout = time.Second
	bounded := func(start time.Time, err error, what string) error {
		took := time.Since(start)
		if err == nil {
			return fmt.Errorf("%s succeeded with a dead peer", what)
		}
		if !errors.Is(err, transport.ErrTimeout) && !errors.Is(err, transport.ErrPeer) {
			return fmt.Errorf("%s: unexpected error %v", what, err)
		}
		if took > timeout+hangGuard {
			return fmt.Errorf("%s gave up after %v (timeout %v)", what, took, timeout)
		}
		return nil
	}
	t.Run("start", func(t *testing.T) {
		var survivors sync.WaitGroup
		survivors.Add(2)
		runJob(t, 3, jobOpts{timeout: timeout, noBarrier: true}, func(r *rank) error {
			p := New(r.C, 1)
			if r.Me() == 1 {
				if err := r.F.Barrier(); err != nil {
					return err
				}
				return r.F.Close()
			}
			defer func() { survivors.Done(); survivors.Wait() }()
			if r.Me() == 0 {
				if err := p.Post([]int{2}); err != nil {
					return err
				}
			}
			if err := r.F.Barrier(); err != nil {
				return err
			}
			start := time.Now()
			var err error
			if r.Me() == 0 {
				err = bounded(start, p.Start([]int{1}), "start({1})")
			} else {
				// Rank 0 posted, rank 1 never will.
				err = bounded(start, p.Start([]int{0, 1}), "start({0, 1})")
			}
			if err != nil {
				return err
			}
			// The failed Start consumed no post: it may be called again,
			// and rank 0's post still opens an epoch to rank 0.
			if r.Me() == 2 {
				if err := p.Start([]int{0}); err != nil {
					return fmt.Errorf("Start({0}) after a failed Start: %w", err)
				}
			}
			return nil
		})
	})
	t.Run("wait", func(t *testing.T) {
		var survivors sync.WaitGroup
		survivors.Add(2)
		runJob(t, 3, jobOpts{timeout: timeout, noBarrier: true}, func(r *rank) error {
			p := New(r.C, 1)
			if r.Me() == 1 {
				if err := r.F.Barrier(); err != nil {
					return err
				}
				return r.F.Close()
			}
			defer func() { survivors.Done(); survivors.Wait() }()
			if r.Me() == 0 {
				if err := p.Post([]int{1, 2}); err != nil {
					return err
				}
			}
			if err := r.F.Barrier(); err != nil {
				return err
			}
			if r.Me() == 2 {
				if err := p.Start([]int{0}); err != nil {
					return err
				}
				return p.Complete()
			}
			start := time.Now()
			err := p.Wait()
			t.Logf("wait: %v", err)
			if err := bounded(start, err, "wait"); err != nil {
				return err
			}
			// The epoch stays open; Test does not end it either.
			if done, _ := p.Test(); done {
				return fmt.Errorf("Test ended an epoch a dead rank never completed")
			}
			return nil
		})
	})
}

// TestNoAllocs: a steady-state epoch allocates nothing.
func TestNoAllocs(t *testing.T) {
	runJob(t, 1, jobOpts{}, func(r *rank) error {
		p := New(r.C, 1)
		defer p.Close()
		g := []int{0}
		var err error
		allocs := testing.AllocsPerRun(200, func() {
			err = errors.Join(err, p.Post(g), p.Start(g), p.Complete(), p.Wait())
		})
		if err != nil {
			return err
		}
		t.Logf("%v allocations per epoch", allocs)
		if allocs > 0 {
			return fmt.Errorf("%v allocations per epoch, want 0", allocs)
		}
		return nil
	})
}

// TestSidesInGoroutines: the exposure side (Post, Wait) and the access side
// (Start, put, Complete) of each rank run in two goroutines, on a ring.
func TestSidesInGoroutines(t *testing.T) {
	const n, iters = 4, 60
	runJob(t, n, jobOpts{}, func(r *rank) error {
		p := New(r.C, 1)
		defer p.Close()
		me := r.Me()
		left, right := (me+n-1)%n, (me+1)%n
		var expErr, accErr error
		var wg sync.WaitGroup
		wg.Add(2)
		go func() {
			defer wg.Done()
			for i := range iters {
				if expErr = p.Post([]int{left}); expErr != nil {
					return
				}
				if expErr = p.Wait(); expErr != nil {
					return
				}
				if got, want := r.U64(8*left), val(i, left); got != want {
					expErr = fmt.Errorf("iteration %d: %#x, want %#x", i, got, want)
					return
				}
			}
		}()
		go func() {
			defer wg.Done()
			for i := range iters {
				if accErr = p.Start([]int{right}); accErr != nil {
					return
				}
				if accErr = write1(r, []int{right}, 8*me, stageOff, val(i, me)); accErr != nil {
					return
				}
				if accErr = p.Complete(); accErr != nil {
					return
				}
			}
		}()
		wg.Wait()
		return errors.Join(expErr, accErr)
	})
}
