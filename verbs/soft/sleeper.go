package soft

import (
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The sleeper: the one goroutine of a context that sleeps in the kernel
// until a socket of its queue pairs has data, for the reader goroutines,
// and only while no goroutine of the process polls the sockets.
//
// The connected sockets are kept out of Go's network poller on purpose.
// The runtime's idle thread sleeps in epoll_wait whenever any goroutine
// waits for a descriptor or a timer, and the kernel wakes it at every
// frame that arrives on a socket the poller watches, even while a waiting
// goroutine (progress.go) reads that socket itself: on a node whose cores
// the ranks fill, that thread takes the core of the very process whose
// answer the poller waits for. In the 2-rank ping-pong on 2 cores that
// cost a context switch per round trip and about 40 % of a fence's time.
//
// Here the sockets are in the context's own epoll set, armed one-shot by
// the reader goroutine that waits for its socket (rxStream.waitReadable).
// Only that set is in Go's poller, so a socket armed wakes the process
// once, and not again until its reader has been woken and armed it again.
// The sleeper collects the set's events and wakes the readers, but only
// when nobody polls: no goroutine holds the progress token and none
// released it within the spin time. While a goroutine polls, the readers
// stay asleep and their sockets disarmed after the first frame; when it
// stops polling to block, it nudges the sleeper. A rank that stops calling
// rma altogether leaves its sockets unwatched for at most the spin time
// (DefaultSpin, and sleepRecheck), the time after which a spinner would
// have stopped anyway.
//
// The sleeper waits for the set in Go's poller, not in epoll_wait: a
// goroutine blocked in a system call keeps its processor until the
// runtime's monitor takes it away, and every such take had the monitor
// look again after 20 µs, a wake-up that took a spinning rank's core.
type sleeper struct {
	epfd int      // the context's epoll set of its connected sockets
	set  *os.File // epfd in Go's poller
	rc   syscall.RawConn
	mu   sync.Mutex // guards streams
	// streams are the sockets in the set, by descriptor.
	streams map[int32]*rxStream
	evs     [64]unix.EpollEvent // collect's; the sleeper goroutine's
	collect func(uintptr) bool  // collectFn, bound once
	ran     int                 // frames collect ran; the sleeper goroutine's

	oneShot bool          // polling is on: arm one event at a time (arm)
	nudge   chan struct{} // a poller stopped: sleep now (cap 1)
	done    chan struct{} // closed when the sleeper goroutine has ended
}

// startSleeper makes the context's epoll set and starts its sleeper.
func (g *progress) startSleeper() error {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return fmt.Errorf("soft: epoll_create1: %w", err)
	}
	// Non-blocking, so that os.NewFile puts it in Go's poller.
	if err := unix.SetNonblock(epfd, true); err != nil {
		unix.Close(epfd)
		return fmt.Errorf("soft: epoll set: %w", err)
	}
	s := &g.sl
	s.epfd = epfd
	s.set = os.NewFile(uintptr(epfd), "soft-epoll")
	if s.rc, err = s.set.SyscallConn(); err != nil {
		s.set.Close()
		return fmt.Errorf("soft: epoll set: %w", err)
	}
	s.streams = map[int32]*rxStream{}
	s.oneShot = g.spinFor > 0
	s.collect = s.collectFn
	s.nudge, s.done = make(chan struct{}, 1), make(chan struct{})
	go g.sleep()
	return nil
}

// stopSleeper ends the sleeper and closes the epoll set; the queue pairs
// are closed already.
func (g *progress) stopSleeper() {
	s := &g.sl
	if s.set == nil {
		return
	}
	s.set.Close() // ends the sleeper's wait
	select {
	case s.nudge <- struct{}{}: // or its pause
	default:
	}
	<-s.done
}

// add puts a stream's socket in the epoll set, disarmed: its reader arms
// it when it waits.
func (s *sleeper) add(r *rxStream) error {
	s.mu.Lock()
	s.streams[int32(r.fd)] = r
	s.mu.Unlock()
	ev := unix.EpollEvent{Events: unix.EPOLLONESHOT, Fd: int32(r.fd)}
	if err := unix.EpollCtl(s.epfd, unix.EPOLL_CTL_ADD, r.fd, &ev); err != nil {
		s.remove(r)
		return fmt.Errorf("soft: epoll_ctl: %w", err)
	}
	return nil
}

// remove takes a stream's socket out of the set; called before the
// descriptor is closed.
func (s *sleeper) remove(r *rxStream) {
	s.mu.Lock()
	if s.streams[int32(r.fd)] == r {
		delete(s.streams, int32(r.fd))
	}
	s.mu.Unlock()
	unix.EpollCtl(s.epfd, unix.EPOLL_CTL_DEL, r.fd, nil)
}

// arm watches r's socket for data again (or reports what is there
// already); the descriptor's read lock held. With polling on it is one
// event (EPOLLONESHOT: the socket is quiet again until the next arm); with
// polling off nothing polls between the sleeper's collections, so the
// socket stays watched (level-triggered) until disarm, and the sleeper
// arms nothing after each collection.
func (s *sleeper) arm(r *rxStream) error {
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLRDHUP, Fd: int32(r.fd)}
	if s.oneShot {
		ev.Events |= unix.EPOLLONESHOT
	}
	return unix.EpollCtl(s.epfd, unix.EPOLL_CTL_MOD, r.fd, &ev)
}

// disarm stops watching r's socket while its reader goroutine owns the
// stream (a level-triggered socket would report the same data until the
// reader has read it); the descriptor's read lock held.
func (s *sleeper) disarm(r *rxStream) error {
	ev := unix.EpollEvent{Fd: int32(r.fd)}
	return unix.EpollCtl(s.epfd, unix.EPOLL_CTL_MOD, r.fd, &ev)
}

// sleep is the sleeper goroutine: it waits for the set's events in Go's
// poller while nobody polls, and pauses while somebody does.
func (g *progress) sleep() {
	s := &g.sl
	defer close(s.done)
	t := time.NewTimer(time.Hour)
	t.Stop()
	for {
		if d := g.polledFor(); d > 0 {
			t.Reset(d)
			select {
			case <-t.C:
			case <-s.nudge:
				t.Stop()
			}
			continue
		}
		s.ran = 0
		if err := s.rc.Read(s.collect); err != nil {
			return // the set was closed
		}
		if s.ran > 0 {
			g.spinReader() // more may follow: poll while it comes
		}
	}
}

// collectFn is the sleeper's function for the set's rc.Read: it takes the
// events there are without waiting and runs what arrived (runReady). It
// declines (the sleeper then waits in Go's poller) only if there are none.
func (s *sleeper) collectFn(fd uintptr) bool {
	// A wait that never blocks: made without telling the scheduler, as
	// rawRead is.
	r0, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, fd, uintptr(unsafe.Pointer(&s.evs[0])), uintptr(len(s.evs)), 0, 0, 0)
	if e != 0 {
		return e != syscall.EINTR && e != syscall.EAGAIN
	}
	n := int(r0)
	for _, ev := range s.evs[:n] {
		s.mu.Lock()
		r := s.streams[ev.Fd]
		s.mu.Unlock()
		if r != nil {
			s.ran += r.runReady()
		}
	}
	return n > 0
}

// sleepRecheck is the shortest pause of the sleeper while the sockets are
// polled: each end of a pause may wake a thread, which on a full node
// takes a core from a rank that spins. It was 1 ms; then a rank that
// stopped polling to compute, or to sleep in a lock's backoff, left its
// sockets unwatched for that long, and its peers' requests waited:
// apps/lockmix, 4 ranks on 2 cores polling, 1834-1943 locks/s against
// 2846-3837 with 100 µs.
const sleepRecheck = 100 * time.Microsecond

// polledFor is how long the sleeper should stay out of the kernel: while
// a goroutine holds the token, the spin time; after one released it, what
// is left of the spin time since; 0 if nobody polls.
func (g *progress) polledFor() time.Duration {
	if g.spinFor <= 0 {
		return 0
	}
	if g.token.Load() != 0 {
		return max(g.spinFor, sleepRecheck)
	}
	last := g.lastPoll.Load()
	if last == 0 {
		return 0
	}
	if d := g.spinFor - time.Duration(time.Now().UnixNano()-last); d > 0 {
		return max(d, sleepRecheck)
	}
	return 0
}

// polled records that a goroutine stopped polling for now (it found what it
// waited for): the sleeper stays out of the kernel for the spin time, in
// case it polls again.
func (g *progress) polled() {
	if g.sl.set != nil {
		g.lastPoll.Store(time.Now().UnixNano())
	}
}

// stopPolling tells the sleeper that the goroutine polling is going to
// block: it sleeps in the kernel from now on.
func (g *progress) stopPolling() {
	g.lastPoll.Store(0)
	select {
	case g.sl.nudge <- struct{}{}:
	default:
	}
}
