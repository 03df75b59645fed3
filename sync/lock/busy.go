package lock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rmago/rmago/transport"
)

// What a lock wait that timed out saw: the waiter names whoever kept the
// lock busy, as far as the lock words tell, from the last value it read
// (no extra round trip). A target's Lock word records its exclusive
// holder's rank; shared holders and the Global word's holders are counts
// only, so for them it gives the counts and the word's rank.

// busyTarget adds to err, if it is a timeout, what target t's Lock word
// showed when last read (s).
func busyTarget(err error, t int, s uint64) error {
	if !errors.Is(err, transport.ErrTimeout) {
		return err
	}
	var b strings.Builder
	if h := holder(s); h >= 0 {
		fmt.Fprintf(&b, "held exclusively by rank %d", h)
	} else if n := s & sharedMask; n > 0 {
		fmt.Fprintf(&b, "held shared by %d locker(s) of rank %d's window, which its lock word does not name", n, t)
	} else {
		fmt.Fprintf(&b, "free at the last look at rank %d", t)
	}
	if w := s & writerMask >> countBits; w > 0 {
		fmt.Fprintf(&b, "; %d exclusive locker(s) counted as waiting (a waiting writer counts itself)", w)
	}
	return fmt.Errorf("%w: %s", err, b.String())
}

// busyGlobal adds to err, if it is a timeout, what the leader's Global
// word showed when last read (s) to a waiter of class c.
func busyGlobal(err error, c class, s uint64) error {
	if !errors.Is(err, transport.ErrTimeout) {
		return err
	}
	return fmt.Errorf("%w: at rank %d's Global word, %d lock_all holder(s) and %d exclusive lock(s) held, "+
		"%d lock_all and %d exclusive locker(s) waiting (counts only: the word does not name them)%s",
		err, Leader, classAll.holders(s), classExcl.holders(s), classAll.waiters(s), classExcl.waiters(s), turnNote(c, s))
}

// turnNote says when c waits only for the other class's waiters to take
// their turn (nobody holds): those waiters have stopped looking.
func turnNote(c class, s uint64) string {
	if o := c.other(); o.holders(s) == 0 && c.holders(s) == 0 && o.waiters(s) > 0 && !c.hasTurn(s) {
		return "; nobody holds it and the other class's waiters did not take their turn"
	}
	return ""
}
