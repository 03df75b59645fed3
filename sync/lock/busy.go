package lock

import (
	"errors"
	"fmt"
	"strings"

	"github.com/rmago/rmago/transport"
)

// What a lock wait that timed out saw: the waiter names whoever kept the
// lock busy, as far as the lock word tells, from the last value it read
// (no extra round trip). A target's Lock word records its exclusive
// holder's rank; shared holders (lock_all holders among them), waiting
// writers and lock_all waiters' marks are counts only.

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
