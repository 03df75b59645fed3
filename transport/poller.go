package transport

import (
	"github.com/rmago/rmago/internal/spin"
	"runtime"
	"syscall"
	"time"
)

// Progress drives the fabric once without blocking: it runs what the
// provider has received (soft provider) and records new completions and
// notifications. It reports whether anything happened. The caller is then
// the process's poller until it calls EndProgress. Callers polling their
// own memory use it through Poller, which does both.
func (f *Fabric) Progress() bool {
	ran := false
	for _, p := range f.progs {
		ran = p.Progress() || ran
	}
	f.mu.Lock()
	if !f.polling {
		if got, _ := f.pollLocked(); got {
			f.cond.Broadcast()
			ran = true
		}
	}
	f.mu.Unlock()
	return ran
}

// EndProgress says the caller stopped driving the fabric with Progress
// (see verbs.Progresser).
func (f *Fabric) EndProgress() {
	for _, p := range f.progs {
		p.EndProgress()
	}
}

// Poller paces a goroutine that polls words of its own memory for a
// change a peer's one-sided write or atomic will make. It allocates
// nothing, and follows one of two schedules:
//
//   - with a provider this process drives (soft), while things keep
//     happening it drives the fabric (Progress, as the process's poller
//     until Done or a sleep) and yields; once nothing
//     has happened for LocalSpin it sleeps between polls in the kernel
//     (spin.Sleep: Go's timers would stretch every sleep under a
//     millisecond to about one), 1 µs doubling to 1 ms (an idle rank then
//     costs next to no CPU);
//   - on hardware (and shm), where memory changes by itself, it spins,
//     and on one poll in hwPureSpins it drives the fabric and yields:
//     to goroutines for a few such polls, then for HWSpin to other processes
//     (sched_yield) if the node has more ranks than cores or a NIC or
//     kernel engine needs the CPU (to goroutines only otherwise; with
//     GOMAXPROCS above 1, once per spin.GoschedGap, as each
//     runtime.Gosched wakes an idle processor's thread), and
//     then sleeps the shortest sleep Go offers between polls:
//     longer sleeps are stretched by the timer (to about a millisecond in
//     the Soft-RoCE VM, which made a lock ping-pong 4 times slower), and
//     spinning would take CPU from the peers and, on Soft-RoCE, from the
//     kernel's RDMA engine.
type Poller struct {
	f        *Fabric
	deadline time.Time // zero: none
	spinEnd  time.Time // soft: polling without sleeping until then
	polls    int       // hardware: polls so far that drove the fabric; soft: polls so far
	spins    int       // hardware: polls so far
	asleep   bool      // past the spin, it sleeps between polls
	fresh    bool      // soft: frames ran since the last look at the clock
	pause    time.Duration
	graced   bool         // Grace extended the deadline
	y        spin.Yielder // hardware: its yields to goroutines
}

// LocalSpin is how long a Poller keeps polling without sleeping after the
// last progress it saw, with a provider this process drives.
const LocalSpin = 100 * time.Microsecond

// HWSpin is how long a Poller on hardware (and shm) yields between polls
// before it sleeps: as long as Go's shortest sleep may last (up to a
// millisecond here), the classic rule for spinning, so that a wait no
// longer than a sleep costs no sleep. It used to be LocalSpin: a rank
// polling its flag while the peer copied 8 MiB into its window (the shm
// lock ping-pong) went to sleep after 100 µs and woke up to a millisecond
// late (lock 8 MiB 1192-1252 -> 638-830 µs a round trip, lockall
// 1222-1396 -> 612-736; 2 ranks, three alternating runs). A rank blocked
// for a second still spends only this much of it polling, yielding the
// core to other processes where the node shares its cores or an engine
// needs them.
const HWSpin = time.Millisecond

// hwSpinPauses is how many spin-wait hints (internal/spin) a Poller on
// hardware and shm takes between two polls of its word. It was 8, so that
// a reader polling less often would take the flag's cache line from the
// writer less often (paired runs then: 8 against 1, 0.86 the time of the
// 8 B lock_all ping-pong on shm). Once the sending half of that leg had
// lost most of its cost (the direct fast path, 190 -> 106 ns), one hint
// won: lock_all 0.84-0.86 -> 0.44-0.57 µs a round trip, lock 0.90-0.95
// -> 0.68-0.70 (three alternating runs each; 2 and 4 hints fell between).
// A hint costs 39 ns on this machine (AMD EPYC, Zen 2, under KVM), so 8
// of them made the reader see the flag 150 ns late on average. The waits
// for direct notes take one hint too.
const hwSpinPauses = 1

const (
	localMaxSleep   = time.Millisecond // soft: cap of the doubling sleeps
	hwYields        = 16               // hardware: polls yielding to goroutines only
	hwPureSpins     = 64               // hardware: polls per one that drives the fabric
	hwClockEvery    = 16               // hardware: polls per look at the clock while yielding
	localClockEvery = 8                // soft: polls per look at the clock while spinning
)

// NewPoller starts a wait bounded by the fabric's timeout. It reads no
// clock: Pause sets the deadline (and, with a provider this process
// drives, the end of the spin) at its first look at the clock, so that a
// wait whose condition holds at the first check costs none (a PSCW Start
// whose post came with the last completion, 2-3 % of the soft ping-pong's
// round trip).
func (f *Fabric) NewPoller() Poller {
	return Poller{f: f, pause: time.Microsecond, y: spin.Yielder{Procs: f.procs}}
}

// Grace extends a wait whose Pause reached the deadline, once, by the
// fabric's NoticeGrace, and reports whether it did: a caller that is about
// to blame the ranks it waited for first gives the failure notices of other
// ranks (the cause the ranks it waits for may be stuck on) time to arrive.
func (w *Poller) Grace() bool {
	if w.graced || w.deadline.IsZero() {
		return false
	}
	w.graced = true
	w.deadline = time.Now().Add(w.f.NoticeGrace())
	return true
}

// Pause is called after a poll found nothing: it drives the fabric, and
// yields or sleeps. It returns false, at once, when the deadline has
// passed.
func (w *Poller) Pause() bool {
	if w.f.progs == nil {
		// While it spins, only one poll in hwPureSpins drives the fabric
		// and yields: the others just look at the condition again (a
		// load). A yield to goroutines costs the scheduler's work, and may
		// wake an idle processor's thread that takes the peer's core.
		if w.spins++; w.spins%hwPureSpins != 0 && !w.asleep {
			for range hwSpinPauses {
				spin.Pause()
			}
			return true
		}
		w.f.Progress() // completions and notifications only
		// The clock only every hwClockEvery polls while yielding to
		// goroutines: it costs as much as the poll.
		if w.polls++; w.polls < hwYields && w.polls%hwClockEvery != 0 {
			if w.y.Alone() {
				runtime.Gosched()
			}
			return true
		}
		now := time.Now()
		if w.f.timeout > 0 {
			if w.deadline.IsZero() {
				w.deadline = now.Add(w.f.timeout) // the first look (NewPoller)
			} else if now.After(w.deadline) {
				return false
			}
		}
		switch {
		case w.polls < hwYields:
			w.y.Yield(now)
		case w.spinEnd.IsZero() || now.Before(w.spinEnd):
			// Then, for HWSpin, yield the core to other processes
			// (peers on this node, the kernel's RDMA engine) where they
			// need it: Go's shortest sleep lasts up to a millisecond when
			// nothing else runs. With a core per rank and no engine to
			// leave one to (shm), keep it: a yield may hand it to an
			// unrelated thread for a whole time slice (a shm lock round
			// trip took 27 µs instead of 3 in one run of three).
			if w.spinEnd.IsZero() {
				w.spinEnd = now.Add(HWSpin)
			}
			if w.f.shareCores || w.f.engines {
				syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			} else {
				w.y.Yield(now)
			}
		default:
			w.asleep = true
			time.Sleep(time.Microsecond)
		}
		return true
	}
	// While it spins, the clock only every localClockEvery polls: a look
	// at it cost 7 % of a rank's time in the soft PSCW ping-pong. Frames
	// that ran push the end of the spin back at the next look.
	ran := w.f.Progress()
	w.fresh = w.fresh || ran
	if w.polls++; !w.asleep && w.polls%localClockEvery != 0 {
		if !ran {
			runtime.Gosched()
		}
		return true
	}
	now := time.Now()
	if w.spinEnd.IsZero() { // the first look (NewPoller)
		w.spinEnd = now.Add(LocalSpin)
		if w.f.timeout > 0 {
			w.deadline = now.Add(w.f.timeout)
		}
	}
	if !w.deadline.IsZero() && now.After(w.deadline) {
		return false
	}
	if w.fresh {
		w.fresh, w.asleep = false, false
		w.spinEnd = now.Add(LocalSpin)
		w.pause = time.Microsecond
		return true
	}
	if now.Before(w.spinEnd) {
		runtime.Gosched()
		return true
	}
	w.asleep = true
	d := w.pause
	if !w.deadline.IsZero() {
		d = min(d, w.deadline.Sub(now))
	}
	w.f.EndProgress() // asleep, it polls no more: the reader goroutines take over
	spin.Sleep(d)
	w.pause = min(2*w.pause, localMaxSleep)
	return true
}

// Done ends the wait: call it (defer it) when the polled condition holds or
// the wait fails, so that the provider's own goroutines may poll again.
func (w *Poller) Done() { w.f.EndProgress() }
