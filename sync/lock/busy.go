package lock

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rmago/rmago/sync/control"
	"github.com/rmago/rmago/transport"
)

// What a lock wait that timed out saw: the waiter names whoever kept the
// lock busy, as far as the lock word tells, from the last value it read
// (no extra round trip). A target's Lock word records its exclusive
// holder's rank; shared holders (lock_all holders among them in target
// mode), waiting writers, lock_all waiters' marks and the Global word's
// holders and waiters (leader mode) are counts only.

// busyTarget adds to err, if it is a timeout, what target t's Lock word
// showed when last read (s).
func busyTarget(err error, t int, s uint64) error {
	if !errors.Is(err, transport.ErrTimeout) {
		return err
	}
	return fmt.Errorf("%w: %s", err, describe(t, s))
}

// busyAt is busyTarget for lock_all, which waits at every target: it
// names the target it was waiting at.
func busyAt(err error, t int, s uint64) error {
	if !errors.Is(err, transport.ErrTimeout) {
		return err
	}
	return fmt.Errorf("%w: waiting at rank %d's lock word, %s", err, t, describe(t, s))
}

// describe says who holds and waits for target t's lock, by its word s.
func describe(t int, s uint64) string {
	var b strings.Builder
	switch h := holder(s); {
	case h >= 0:
		fmt.Fprintf(&b, "held exclusively by rank %d", h)
	case h == -2:
		b.WriteString("held exclusively by a rank too large for its lock word to name")
	case s&sharedMask > 0:
		fmt.Fprintf(&b, "held shared by %d locker(s) of rank %d's window, which its lock word does not name", s&sharedMask, t)
	default:
		fmt.Fprintf(&b, "free at the last look at rank %d", t)
	}
	if w := s & writerMask >> countBits; w > 0 {
		fmt.Fprintf(&b, "; %d exclusive locker(s) counted as waiting (a waiting writer counts itself)", w)
	}
	if m := s & markMask >> (2 * countBits); m > 0 {
		fmt.Fprintf(&b, "; %d lock_all locker(s) waiting", m)
	}
	return b.String()
}

// busyGlobal adds to err, if it is a timeout, what the leader's Global
// word showed when last read (s) to a waiter of class c. A lock_all
// waiter that saw exclusive holders also looks for them (survey): their
// ranks are in the targets' Lock words.
func (l *Locks) busyGlobal(err error, sl *slot, c class, s uint64) error {
	if !errors.Is(err, transport.ErrTimeout) {
		return err
	}
	var who string
	if c == classAll && classExcl.holders(s) > 0 {
		who = l.survey(sl)
	}
	return fmt.Errorf("%w: at rank %d's Global word, %d lock_all holder(s) and %d exclusive lock(s) held, "+
		"%d lock_all and %d exclusive locker(s) waiting (counts: the word does not name them)%s%s",
		err, Leader, classAll.holders(s), classExcl.holders(s), classAll.waiters(s), classExcl.waiters(s), turnNote(c, s), who)
}

// surveyMax bounds the survey of a lock_all waiter that timed out.
const surveyMax = 500 * time.Millisecond

// survey reads every rank's Lock word, one at a time, into the lock_all
// slot's second result word (which nothing else uses, so that a late
// answer harms nothing), and names the exclusive holders it finds. A rank
// that does not answer within the survey's bound (a fraction of the
// fabric's timeout, at most surveyMax) ends it and is named too.
func (l *Locks) survey(sl *slot) string {
	bound := surveyMax
	if t := l.f.Timeout(); t > 0 {
		bound = min(bound, t/4)
	}
	deadline := time.Now().Add(bound)
	w := l.f.NewPoller()
	defer w.Done()
	var held []int
	silent := -1
ranks:
	for r := range l.size {
		seq, err := sl.post(r, control.Lock, transport.FetchAddOp, 0, 0, 1)
		if err != nil {
			continue
		}
		for {
			done, err := l.f.Test(r, seq)
			if err != nil {
				continue ranks
			}
			if done {
				break
			}
			if time.Now().After(deadline) || !w.Pause() {
				silent = r
				break ranks
			}
		}
		if h := holder(sl.result(1)); h >= 0 {
			held = append(held, h)
		}
	}
	var b strings.Builder
	if len(held) > 0 {
		fmt.Fprintf(&b, "; exclusive locks held by %s", transport.RankList(held))
	}
	if silent >= 0 {
		fmt.Fprintf(&b, "; rank %d did not answer a read of its lock word within %v", silent, bound)
	}
	return b.String()
}

// turnNote says when c waits only for the other class's waiters to take
// their turn (nobody holds): those waiters have stopped looking.
func turnNote(c class, s uint64) string {
	if o := c.other(); o.holders(s) == 0 && c.holders(s) == 0 && o.waiters(s) > 0 && !c.hasTurn(s) {
		return "; nobody holds it and the other class's waiters did not take their turn"
	}
	return ""
}
