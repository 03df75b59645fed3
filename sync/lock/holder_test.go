package lock

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/rmago/rmago/transport"
)

// namedRanks is the ranks an error message names as "rank N", in order,
// without repeats (the fault suite's ci/faults.NamedRanks reads the same
// form).
func namedRanks(msg string) []int {
	var out []int
	for _, m := range regexp.MustCompile(`\branks? (\d+)`).FindAllStringSubmatch(msg, -1) {
		if n, _ := strconv.Atoi(m[1]); !slices.Contains(out, n) {
			out = append(out, n)
		}
	}
	return out
}

// TestTimeoutNamesHolder: rank 2 holds a lock and stays alive but does not
// release it until the others have given up; the waiters' errors wrap
// transport.ErrTimeout and name exactly the target and, where the lock
// word records it (an exclusive holder), the holder.
func TestTimeoutNamesHolder(t *testing.T) {
	const (
		n      = 4
		holder = 2
		target = 3
	)
	cases := []struct {
		name      string
		exclusive bool         // the holder's lock on target
		all       bool         // the holder takes lock_all instead
		lockAll   map[int]bool // these waiters take lock_all
		want      map[int]string
		ranks     map[int][]int

		leader, targetMode bool // the case holds in this mode only
	}{
		{name: "exclusive", exclusive: true,
			want:  map[int]string{0: "held exclusively by rank 2", 1: "held exclusively by rank 2"},
			ranks: map[int][]int{0: {target, holder}, 1: {target, holder}}},
		{name: "shared",
			want:  map[int]string{0: "held shared by 1 locker(s) of rank 3's window"},
			ranks: map[int][]int{0: {target}}},
		{name: "lockall-behind-exclusive", exclusive: true, lockAll: map[int]bool{0: true},
			want:  map[int]string{0: "0 lock_all holder(s) and 1 exclusive lock(s) held, 1 lock_all and 0 exclusive locker(s) waiting (counts: the word does not name them); exclusive locks held by rank 2"},
			ranks: map[int][]int{0: {Leader, holder}}, leader: true},
		{name: "lockall", all: true,
			want:  map[int]string{0: "1 lock_all holder(s) and 0 exclusive lock(s) held"},
			ranks: map[int][]int{0: {target, Leader}}, leader: true},
		{name: "lockall-behind-exclusive", exclusive: true, lockAll: map[int]bool{0: true},
			want:  map[int]string{0: "waiting at rank 3's lock word, held exclusively by rank 2; 1 lock_all locker(s) waiting"},
			ranks: map[int][]int{0: {target, holder}}, targetMode: true},
		{name: "lockall", all: true,
			want:  map[int]string{0: "held shared by 1 locker(s) of rank 3's window"},
			ranks: map[int][]int{0: {target}}, targetMode: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var gaveUp sync.WaitGroup
			gaveUp.Add(len(c.want))
			runJob(t, n, jobOpts{timeout: time.Second}, func(r *rank) error {
				l := New(r.C)
				if c.leader && l.target || c.targetMode && !l.target {
					return nil // a case of the other mode: every rank skips it
				}
				me := r.Me()
				if me == holder {
					if c.all {
						if err := l.LockAll(); err != nil {
							return err
						}
					} else if err := l.Lock(target, c.exclusive); err != nil {
						return err
					}
				}
				if err := r.F.Barrier(); err != nil {
					return err
				}
				// The others wait for the waiters too: the job's closing
				// barrier is bounded by the same short timeout.
				switch want, waits := c.want[me]; {
				case me == holder:
					gaveUp.Wait()
					if c.all {
						return l.UnlockAll()
					}
					return l.Unlock(target, c.exclusive)
				case !waits:
					gaveUp.Wait()
				default:
					var err error
					if c.lockAll[me] {
						err = l.LockAll()
					} else {
						err = l.Lock(target, me == 0)
					}
					gaveUp.Done()
					if err == nil {
						return fmt.Errorf("lock granted while rank %d holds a conflicting one", holder)
					}
					if !errors.Is(err, transport.ErrTimeout) {
						return fmt.Errorf("error %v does not wrap ErrTimeout", err)
					}
					msg := err.Error()
					if !regexp.MustCompile(regexp.QuoteMeta(want)).MatchString(msg) {
						return fmt.Errorf("error %q does not say %q", msg, want)
					}
					if got := namedRanks(msg); !slices.Equal(got, c.ranks[me]) {
						return fmt.Errorf("error %q names ranks %v, want %v", msg, got, c.ranks[me])
					}
					t.Logf("rank %d: %v", me, err)
				}
				return nil
			})
		})
	}
}
