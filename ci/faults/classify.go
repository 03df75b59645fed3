package faults

import (
	"errors"
	"slices"
	"strconv"
	"strings"

	"github.com/rmago/rmago/rma"
	"github.com/rmago/rmago/sync/pscw"
	"github.com/rmago/rmago/transport"
	"github.com/rmago/rmago/verbs"
)

// Class is the kind of an error a rank got, as far as a fault is concerned.
type Class string

// Classes.
const (
	// ClassNone: no error.
	ClassNone Class = ""
	// ClassPeer: a peer failed or went away (transport.ErrPeer, a verbs
	// transport error or flush).
	ClassPeer Class = "peer"
	// ClassTimeout: a wait passed RMAGO_TIMEOUT (transport.ErrTimeout).
	ClassTimeout Class = "timeout"
	// ClassClosed: the rank's own world or fabric is closed: a wrong
	// answer to another rank's fault.
	ClassClosed Class = "closed"
	// ClassBootstrap: the start-up exchange failed.
	ClassBootstrap Class = "bootstrap"
	// ClassAccess: a memory protection error (remote or local access).
	ClassAccess Class = "access"
	// ClassUsage: the library refused a call as misuse (epoch state, rank,
	// range): a wrong answer to a fault.
	ClassUsage Class = "usage"
	// ClassCorrupt: not a library error: the rank found wrong data in its
	// window or in what it read back.
	ClassCorrupt Class = "corrupt"
	// ClassOther: an error that wraps none of the known sentinels.
	ClassOther Class = "unclassified"
)

// classes maps sentinels to classes, first match wins: a peer failure may
// wrap a verbs timeout, so ClassPeer comes before ClassTimeout. A new
// sentinel (say, a peer-failed error of the transport) is one more entry.
var classes = []struct {
	class     Class
	sentinels []error
}{
	{ClassPeer, []error{transport.ErrPeer, verbs.ErrTransport, verbs.ErrFlushed, verbs.ErrQPState, verbs.ErrRNR}},
	{ClassTimeout, []error{transport.ErrTimeout, verbs.ErrTimeout}},
	{ClassClosed, []error{transport.ErrClosed, rma.ErrClosed, rma.ErrFreed, pscw.ErrClosed, verbs.ErrClosed}},
	{ClassBootstrap, []error{transport.ErrBootstrap, verbs.ErrAuth}},
	{ClassAccess, []error{verbs.ErrRemoteAccess, verbs.ErrLocalAccess, verbs.ErrRemoteOp, verbs.ErrLocalCompletion}},
	{ClassUsage, []error{rma.ErrRank, rma.ErrRange, rma.ErrNoEpoch, rma.ErrEpochOpen, rma.ErrMismatch,
		rma.ErrSize, rma.ErrEpochConflict, rma.ErrNotLocked, rma.ErrNotStarted, rma.ErrNotPosted, rma.ErrGroup}},
}

// Classify returns the class of err (ClassNone for nil).
func Classify(err error) Class {
	if err == nil {
		return ClassNone
	}
	for _, c := range classes {
		for _, s := range c.sentinels {
			if errors.Is(err, s) {
				return c.class
			}
		}
	}
	return ClassOther
}

// Expected returns the classes of error a surviving rank may get for fault
// f, or nil if no error is allowed. A killed rank's sockets are closed by
// its kernel, so its peers can tell at once (ClassPeer); a stopped,
// stalled or departed rank may only be noticed by a wait passing the
// timeout, unless the library notices more (ClassPeer).
func Expected(f Fault) []Class {
	switch f {
	case Kill9:
		return []Class{ClassPeer}
	case Stop, StopCont, StopRead, Close:
		return []Class{ClassPeer, ClassTimeout}
	}
	return nil
}

// RightClass reports whether c is one of the classes fault f allows.
func RightClass(f Fault, c Class) bool { return slices.Contains(Expected(f), c) }

// NamedRanks returns the ranks an error message names: every number, or
// list of numbers ("ranks 1, 3 and 4", "ranks [1 3]"), that follows the
// word "rank", "ranks" or "rank(s)" (any case), in order, without repeats.
func NamedRanks(msg string) []int {
	var out []int
	lower := strings.ToLower(msg)
	for i := 0; ; {
		j := strings.Index(lower[i:], "rank")
		if j < 0 {
			return out
		}
		i += j + len("rank")
		if i-len("rank") > 0 && isWordByte(lower[i-len("rank")-1]) {
			continue // "frank", "pranks": not the word
		}
		k := i
		if k < len(lower) && lower[k] == 's' {
			k++
		} else if strings.HasPrefix(lower[k:], "(s)") {
			k += len("(s)") // the transport's "none from rank(s) [1 3]"
		}
		// A list: numbers separated by spaces, commas, "and", brackets.
		for k < len(lower) {
			switch {
			case lower[k] == ' ' || lower[k] == ',' || lower[k] == '[' || lower[k] == ']' || lower[k] == '#' || lower[k] == '=':
				k++
			case strings.HasPrefix(lower[k:], "and "):
				k += len("and ")
			case lower[k] >= '0' && lower[k] <= '9':
				e := k
				for e < len(lower) && lower[e] >= '0' && lower[e] <= '9' {
					e++
				}
				if n, err := strconv.Atoi(lower[k:e]); err == nil && !slices.Contains(out, n) {
					out = append(out, n)
				}
				k = e
			default:
				goto next
			}
		}
	next:
		i = k
	}
}

func isWordByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_'
}
