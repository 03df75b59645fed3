package soft

import "sync/atomic"

// Holding back what a peer waits for. Some of what this side sends is
// awaited by a peer: a notification posted with verbs.Coalesce (PSCW's
// complete), an atomic posted so (a lock's release), and the answers held
// for this side's next request (held.go). Held back, each leaves with
// this side's next request or wait, one write instead of two: soft, 2
// ranks, 8 B, PSCW 9.2 against 17.2 µs a round trip, the lock ping-pong
// 24.6 against 33.1, OSU's put_latency with lock 7.3 against 11.6.
//
// But a program that leaves rmago to compute takes that next request
// with it, and the cork's timer is a Go timer: it fires a millisecond
// late while the processors are idle (the network poller sleeps in whole
// milliseconds), and not before the runtime preempts the program while
// the program computes on all of them. A rank that computed right after
// Complete kept its peer in Wait for 1.6 ms (median of 40) instead of
// tens of microseconds; one that computed right after the flag it polled
// showed kept the peer's Unlock for 1.1 ms; a lock released just before
// computing kept the next locker waiting until the computation ended.
//
// So a context holds such traffic back only while its program comes back
// for it. When the cork's timer finds some that has waited since the
// timer was set, with nothing written on the queue pair meanwhile, the
// program has left it behind: for the next window decisions the context
// sends awaited traffic at once (64 at first, doubling each time it is
// left behind again, up to 65,536). Awaited traffic that the program's own
// next post or wait sends shows it back in a tight loop and sets the
// window back to 64. A program that alternates the two pays the timer's
// delay once per window, where it used to pay it every time; one that
// never computes between calls never pays it. Without polling, or with
// more ranks than cores, nothing awaited is held back: a rank that
// computes then holds its only processor, the timer cannot tell, and
// every hold lasted as long as the computation (apps/sor's get variant, 4
// ranks on 2 cores, an iteration: 0.87-1.10 ms holding, 0.73-0.87 not).

// holdState is a context's judgement of whether its program comes back
// for what it holds.
type holdState struct {
	off    atomic.Int32 // decisions left that send awaited traffic at once
	window atomic.Int32 // off after the next time traffic is left behind (0: minWindow)
	// never: polling is off, or the node runs more ranks than cores
	// (verbs.Config.ShareCores; the ranks then run with GOMAXPROCS 1): a
	// program that computes holds the only processor, so the timer that
	// would tell it left traffic behind runs only once the program is
	// back, and has sent the traffic itself.
	never bool
}

const (
	minHoldWindow = 64
	maxHoldWindow = 1 << 16
)

// mayHold reports whether awaited traffic may be held back now; each
// refusal counts down the window.
func (h *holdState) mayHold() bool {
	if h.never {
		return false
	}
	if h.off.Load() <= 0 {
		return true
	}
	h.off.Add(-1)
	return false
}

// leftBehind records that the cork's timer found awaited traffic the
// program had left behind: refuse to hold for a window, doubled for the
// next time.
func (h *holdState) leftBehind() {
	w := max(h.window.Load(), minHoldWindow)
	h.off.Store(w)
	h.window.Store(min(2*w, maxHoldWindow))
}

// cameBack records that the program sent held awaited traffic itself.
func (h *holdState) cameBack() {
	if h.window.Load() > minHoldWindow {
		h.window.Store(minHoldWindow)
	}
}

// awaitedKind reports whether a request posted with verbs.Coalesce is
// one a peer waits for: a notification or an atomic (not a write that is
// signalled only so that the send queue drains).
func awaitedKind(kind uint8) bool {
	return kind == kReqWriteImm || kind == kReqFAA || kind == kReqCAS
}
