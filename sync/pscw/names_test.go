package pscw

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/transport"
)

// namedRanks is the ranks an error message names as "rank N" or
// "ranks [N M ...]", in order, without repeats (the forms the fault
// suite's ci/faults.NamedRanks reads).
func namedRanks(msg string) []int {
	var out []int
	for _, m := range regexp.MustCompile(`\branks? \[?(\d+(?: \d+)*)\]?`).FindAllStringSubmatch(msg, -1) {
		for _, f := range strings.Fields(m[1]) {
			if n, _ := strconv.Atoi(f); !slices.Contains(out, n) {
				out = append(out, n)
			}
		}
	}
	return out
}

// checkNames checks that err is a timeout naming exactly the ranks want.
func checkNames(err error, want []int) error {
	if err == nil {
		return fmt.Errorf("no error, want a timeout naming ranks %v", want)
	}
	if !errors.Is(err, transport.ErrTimeout) {
		return fmt.Errorf("error %v does not wrap ErrTimeout", err)
	}
	if got := namedRanks(err.Error()); !slices.Equal(got, want) {
		return fmt.Errorf("error %q names ranks %v, want %v", err, got, want)
	}
	return nil
}

// TestWaitNamesMissing: rank 0 exposes its window to ranks 1-4; ranks 3
// and 4 hold back their Complete until rank 0's Wait has timed out. The
// error names exactly ranks 3 and 4; the epoch stays open, and a second
// Wait, after they completed, succeeds.
func TestWaitNamesMissing(t *testing.T) {
	var timedOut sync.WaitGroup
	timedOut.Add(1)
	runJob(t, 5, jobOpts{timeout: time.Second}, func(r *rank) error {
		p := New(r.C, 1)
		defer p.Close()
		if r.Me() == 0 {
			if err := p.Post([]int{1, 2, 3, 4}); err != nil {
				return err
			}
			err := p.Wait()
			timedOut.Done()
			if err := checkNames(err, []int{3, 4}); err != nil {
				return err
			}
			t.Logf("rank 0: %v", err)
			return p.Wait()
		}
		if err := p.Start([]int{0}); err != nil {
			return err
		}
		if r.Me() >= 3 {
			timedOut.Wait()
		}
		err := p.Complete()
		// The job's closing barrier is bounded by the same short timeout.
		timedOut.Wait()
		return err
	})
}

// TestStartNamesMissing: rank 1 starts an access epoch to ranks 0, 2 and
// 3; rank 3 posts only after rank 1's Start has timed out. The error names
// exactly rank 3; a second Start succeeds.
func TestStartNamesMissing(t *testing.T) {
	var timedOut sync.WaitGroup
	timedOut.Add(1)
	runJob(t, 4, jobOpts{timeout: time.Second}, func(r *rank) error {
		p := New(r.C, 1)
		defer p.Close()
		if r.Me() == 1 {
			err := p.Start([]int{0, 2, 3})
			timedOut.Done()
			if err := checkNames(err, []int{3}); err != nil {
				return err
			}
			t.Logf("rank 1: %v", err)
			if err := p.Start([]int{0, 2, 3}); err != nil {
				return err
			}
			return p.Complete()
		}
		if r.Me() == 3 {
			timedOut.Wait()
		}
		if err := p.Post([]int{1}); err != nil {
			return err
		}
		if r.Me() != 3 {
			// Wait's timeout would run out while rank 1's Start waits.
			timedOut.Wait()
		}
		return p.Wait()
	})
}
