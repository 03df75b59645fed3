package lock

import (
	"fmt"
	"sync"
	"testing"
)

// TestModeChoice: every rank of a job chooses the same mode, target mode
// exactly when every rank reaches every other through CPU atomics (shm on
// one node), leader mode when some rank is reached through a network
// (soft, or the mixed job of pretend nodes), and in either mode an
// exclusive lock and lock_all exclude each other (TestExclusiveExcludesLockAll
// and the fairness tests run whichever mode the provider gives).
func TestModeChoice(t *testing.T) {
	const n = 4
	var (
		mu    sync.Mutex
		modes []bool
		local []bool
	)
	runJob(t, n, jobOpts{}, func(r *rank) error {
		l := New(r.C)
		all := true
		for p := range n {
			all = all && r.F.ProviderOf(p) == "shm"
		}
		mu.Lock()
		modes = append(modes, l.target)
		local = append(local, all)
		mu.Unlock()
		if l.target != all {
			return fmt.Errorf("rank %d: target mode %v, but every rank reached by shm: %v (providers %v)", r.Me(), l.target, all, r.F.Providers())
		}
		return nil
	})
	for i := range modes {
		if modes[i] != modes[0] {
			t.Fatalf("ranks chose different modes: %v", modes)
		}
	}
	t.Logf("target mode: %v (every rank by shm: %v)", modes[0], local[0])
}
