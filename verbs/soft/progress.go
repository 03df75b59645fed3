package soft

import (
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rmago/rmago/verbs"
)

// Progress by polling: which goroutine drives the receive engines of a
// context's queue pairs between sleeps (rx.go), so that at most one of the
// process spins, and the verbs.Progresser a caller polling its own memory
// uses.

// DefaultSpin is how long a spinner goes on polling after the last frame
// it ran before it sleeps, unless verbs.Config.Spin (RMAGO_SOFT_SPIN
// through transport) says otherwise. It covers a few round trips on
// loopback TCP.
const DefaultSpin = 100 * time.Microsecond

// spinOf is the polling time verbs.Config.Spin asks for: 0 is
// DefaultSpin, negative never polls.
func spinOf(cfg verbs.Config) time.Duration {
	switch {
	case cfg.Spin == 0:
		return DefaultSpin
	case cfg.Spin < 0:
		return 0
	}
	return cfg.Spin
}

// progress drives the receive engines of a context's connected queue
// pairs by polling. At most one goroutine of the process spins at a time
// (two spinners on a small machine steal each other's cores):
//
//   - a goroutine waiting in cq.Wait, which has priority, since it can
//     return the completion it finds without waking anyone;
//   - otherwise the reader goroutine that last woke up with frames, so
//     that a rank busy elsewhere (or asleep in a barrier) still answers a
//     stream of one-sided requests at polling speed.
//
// A spinner stops when nothing has arrived for spinFor; then the reader
// goroutines sleep in the network poller again.
type progress struct {
	spinFor time.Duration // set at Open
	// shareCores: the node runs more ranks than cores (verbs.Config.
	// ShareCores): a spinner gives its core to other processes between
	// polls (sched_yield), not only to this process's goroutines.
	shareCores bool
	mu         sync.Mutex
	qps        atomic.Pointer[[]*qp] // connected queue pairs (copy on write, under mu)
	token      atomic.Int32          // 0: nobody spins; spinReader; spinWaiter
	waiters    atomic.Int32          // goroutines in cq.Wait that want the token
	handover   atomic.Bool           // a Progress caller wants the token
	ncorked    atomic.Int32          // queue pairs with frames in their cork (coalesce.go)
	loops      atomic.Uint32         // loopback requests posted (loopback.go)
	passes     atomic.Uint32         // pollAll's passes (loopback pairs are read every loopPassEvery-th)
	// lastPoll is when a goroutine last stopped polling having found what
	// it waited for (Unix ns; 0: the last one stopped to block): the
	// sleeper stays out of the kernel for the spin time after it.
	lastPoll atomic.Int64
	sl       sleeper // sleeps for the reader goroutines (sleeper.go)
}

const (
	spinReader = 1
	spinWaiter = 2
)

// attach lists a connected queue pair.
func (g *progress) attach(p *qp) {
	g.mu.Lock()
	defer g.mu.Unlock()
	var list []*qp
	if old := g.qps.Load(); old != nil {
		list = append(list, *old...)
	}
	list = append(list, p)
	g.qps.Store(&list)
}

// detach removes a closed queue pair.
func (g *progress) detach(p *qp) {
	g.mu.Lock()
	defer g.mu.Unlock()
	old := g.qps.Load()
	if old == nil {
		return
	}
	list := make([]*qp, 0, len(*old))
	for _, x := range *old {
		if x != p {
			list = append(list, x)
		}
	}
	g.qps.Store(&list)
}

// loopPassEvery is how often pollAll reads the sockets of loopback queue
// pairs: once every loopPassEvery passes. Their requests run in the post
// (loopback.go), so their sockets carry nothing but the goodbye at Close,
// and each read is a system call: reading the two ends of a rank's
// loopback pair at every pass tripled a spinner's reads in a two-rank job
// and the time it took to notice a peer's frame.
const loopPassEvery = 64

// pollAll runs what has arrived on every queue pair; it reports how many
// frames ran.
func (g *progress) pollAll() int { return g.pollEach(holdNone) }

// pollEach is pollAll; hold says which answers of what ran may wait for
// the caller's next request (held.go): a goroutine polling its own memory
// (device.Progress) holds reads' and atomics' answers, one waiting on a
// completion queue reads' only.
func (g *progress) pollEach(hold holdMode) int {
	list := g.qps.Load()
	if list == nil {
		return 0
	}
	all := g.passes.Add(1)%loopPassEvery == 0
	ran := 0
	for _, p := range *list {
		if p.loop != nil && !all {
			continue
		}
		ran += p.poll(hold)
	}
	return ran
}

// spinWaiter is cq.Wait's busy phase: it takes the token (a spinning
// reader goroutine hands it over at once) and polls every queue pair until
// cq has a completion, or nothing has arrived for spinFor (counted from
// the first of consecutive Waits that found nothing: cq.idle), or the
// deadline has passed. If another waiter spins, it returns at once.
func (g *progress) spinWaiter(q *cq, wc []verbs.WC, deadline time.Time) (int, error) {
	if g.spinFor <= 0 {
		return 0, nil
	}
	g.waiters.Add(1)
	defer g.waiters.Add(-1)
	for {
		t := g.token.Load()
		if t == spinWaiter {
			return 0, nil
		}
		if t == 0 && g.token.CompareAndSwap(0, spinWaiter) {
			break
		}
		// A reader goroutine is handing the token over (it may first
		// finish draining a burst, and complete our request meanwhile).
		if n, err := q.Poll(wc); n > 0 || err != nil {
			return n, err
		}
		runtime.Gosched()
	}
	found := false
	defer func() {
		g.token.Store(0)
		if found {
			g.polled()
		} else {
			g.stopPolling()
		}
	}()
	now := time.Now()
	end := now.Add(g.spinFor)
	if t := q.idle.Load(); t != 0 {
		end = time.Unix(0, t).Add(g.spinFor) // what is left of an earlier Wait's
	} else {
		q.idle.Store(now.UnixNano())
	}
	if !deadline.IsZero() && deadline.Before(end) {
		end = deadline
	}
	ran := 0
	for i := 1; ; i++ {
		// The answers of what ran may wait for this goroutine's next
		// request if what ran gave it its completion (held.go); if not,
		// it goes on waiting, and they go now.
		ran += g.pollEach(holdReads)
		if n, err := q.Poll(wc); n > 0 || err != nil {
			found = true
			return n, err
		}
		g.sendHeld()
		if i%8 == 0 {
			var stop bool
			if end, stop = g.spinCheck(q, time.Now(), ran, end, deadline); stop {
				return 0, nil
			}
			ran = 0
		}
		g.yield(i)
	}
}

// spinCheck is a waiter's look at the clock, every 8 polls: ran frames
// ran since the last look, and the spin ends at end. It stops at the
// deadline whether or not frames came: a peer that keeps sending (the lock
// traffic of ranks that have not yet seen this one leave) must not hold a
// wait past it (it did: an early Close's barrier, bounded by 3 s, took up
// to 7 s on a crowded node). Otherwise frames that came push the end of
// the spin time back, and it stops once that end has passed.
func (g *progress) spinCheck(q *cq, now time.Time, ran int, end, deadline time.Time) (time.Time, bool) {
	if !deadline.IsZero() && now.After(deadline) {
		return end, true
	}
	if ran == 0 {
		return end, now.After(end)
	}
	// Frames keep coming: keep serving them.
	q.idle.Store(now.UnixNano())
	end = now.Add(g.spinFor)
	if !deadline.IsZero() && deadline.Before(end) {
		end = deadline
	}
	return end, false
}

// yield is a spinner's pause between polls i and i+1: it lets this
// process's goroutines run and, when the node shares its cores, other
// processes (the rank whose answer it waits for may need the core).
func (g *progress) yield(i int) {
	if g.shareCores && i&7 != 7 {
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
		return
	}
	runtime.Gosched()
}

// spinReader is a reader goroutine's busy phase after it woke up with
// frames: if nobody spins, it polls every queue pair until nothing has
// arrived for spinFor, or a waiter wants the token.
func (g *progress) spinReader() {
	if g.spinFor <= 0 || g.waiters.Load() > 0 || !g.token.CompareAndSwap(0, spinReader) {
		return
	}
	idle := false
	defer func() {
		g.handover.Store(false)
		g.token.Store(0)
		if idle {
			g.stopPolling()
		} else {
			g.polled() // a waiter takes over
		}
	}()
	end := time.Now().Add(g.spinFor)
	for i := 1; g.waiters.Load() == 0 && !g.handover.Load(); i++ {
		if g.pollAll() > 0 {
			end = time.Now().Add(g.spinFor)
		} else if i%8 == 0 && time.Now().After(end) {
			idle = true
			return
		}
		g.yield(i)
	}
}

// Progress runs what has arrived on the context's queue pairs
// (verbs.Progresser) as a waiter, which keeps the token until EndProgress:
// a spinning reader goroutine is asked to hand it over (this call then
// returns false; the next one polls). It reports whether any frame ran,
// or part of a large payload came (rx.go's drain).
func (c *device) Progress() bool {
	g := &c.prog
	g.sendCorks()
	g.sendHeld()
	if g.spinFor <= 0 {
		// Polling is off (more ranks than cores): no token, no spinning,
		// but one pass over the queue pairs. A caller that polls in a loop
		// (Request.Test, a flag) may hold the only processor (GOMAXPROCS=1)
		// and never block, so the reader goroutines would not run.
		return g.pollAll() > 0
	}
	switch g.token.Load() {
	case spinWaiter: // a waiting goroutine polls: this one, or another
	case 0:
		if !g.token.CompareAndSwap(0, spinWaiter) {
			return false
		}
	default:
		g.handover.Store(true)
		return false
	}
	return g.pollEach(holdAll) > 0
}

// EndProgress gives the token back (verbs.Progresser).
func (c *device) EndProgress() {
	if c.prog.token.CompareAndSwap(spinWaiter, 0) {
		c.prog.polled()
	}
}
