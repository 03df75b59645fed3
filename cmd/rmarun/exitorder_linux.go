package main

import (
	"os"
	"sync"
	"syscall"
	"time"
)

// An exitClock reads the ranks' notify pipes (launch.EnvNotifyFD) and takes
// the time each one reaches its end, in the order the kernel saw the ends.
//
// A rank keeps the write end of its pipe open until it dies, at a high
// descriptor number. A dying process closes its files highest first, so
// the pipe ends before the rank's sockets do: before any peer can notice
// the death and fail in turn. One goroutine waits on an epoll set of all
// the pipes, and epoll returns them first come, first served; so the rank
// that failed first is timed first, even if the rmarun thread that reaps
// it runs late, as it may on a loaded host. These times decide which
// failure is reported as the cause. When rmarun begins to stop the ranks,
// markStop puts a marker in the same queue: a rank whose pipe ended before
// it was not stopped, whatever rmarun learnt first.
type exitClock struct {
	once    sync.Once
	epfd    int
	err     error
	mu      sync.Mutex
	pipes   map[int32]*notifyPipe // by read descriptor
	stopFD  int32                 // read end of the stop marker, or -1
	stopped bool                  // the loop has passed the stop marker (loop's)
}

// A pipeEnd is when a rank's notify pipe ended, and whether that was
// after the stop marker.
type pipeEnd struct {
	when    int64 // Unix nanoseconds
	stopped bool
	known   bool // stopped is known (else the caller compares times)
}

// epollET is EPOLLET as a uint32 (the syscall package's constant is negative).
const epollET = 1 << 31

// A notifyPipe is the read end of a rank's notify pipe.
type notifyPipe struct {
	fd     int
	onByte func(byte)
	ended  chan pipeEnd
}

// pipe makes a notify pipe and returns its write end, for the rank, and a
// channel that receives the time the pipe ends. onByte is called, from
// the clock's goroutine, with each byte the rank writes.
func (c *exitClock) pipe(onByte func(byte)) (*os.File, <-chan pipeEnd, error) {
	if err := c.start(); err != nil {
		return nil, nil, c.err
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, err
	}
	syscall.SetNonblock(p[0], true) // the read end's own file description
	np := &notifyPipe{fd: p[0], onByte: onByte, ended: make(chan pipeEnd, 1)}
	c.mu.Lock()
	c.pipes[int32(p[0])] = np
	c.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP | epollET, Fd: int32(p[0])}
	if err := syscall.EpollCtl(c.epfd, syscall.EPOLL_CTL_ADD, p[0], &ev); err != nil {
		c.mu.Lock()
		delete(c.pipes, int32(p[0]))
		c.mu.Unlock()
		syscall.Close(p[0])
		syscall.Close(p[1])
		return nil, nil, err
	}
	return os.NewFile(uintptr(p[1]), "rmago-notify"), np.ended, nil
}

// start starts the clock's goroutine, once.
func (c *exitClock) start() error {
	c.once.Do(func() {
		c.stopFD = -1
		c.epfd, c.err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if c.err == nil {
			c.pipes = make(map[int32]*notifyPipe)
			go c.loop()
		}
	})
	return c.err
}

// markStop queues the stop marker: a pipe whose write end is already
// closed. Call it before signalling the ranks.
func (c *exitClock) markStop() {
	if c.start() != nil {
		return
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return
	}
	c.mu.Lock()
	c.stopFD = int32(p[0])
	c.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | epollET, Fd: int32(p[0])}
	syscall.EpollCtl(c.epfd, syscall.EPOLL_CTL_ADD, p[0], &ev)
	syscall.Close(p[1]) // the end of the marker, queued now
}

// loop reads the pipes as epoll reports them.
func (c *exitClock) loop() {
	events := make([]syscall.EpollEvent, 64)
	var buf [64]byte
	for {
		n, err := syscall.EpollWait(c.epfd, events, -1)
		if err != nil {
			if err == syscall.EINTR {
				continue
			}
			return
		}
		for _, ev := range events[:n] {
			c.mu.Lock()
			np := c.pipes[ev.Fd]
			if ev.Fd == c.stopFD {
				c.stopped = true
				c.stopFD = -1
				syscall.Close(int(ev.Fd))
			}
			c.mu.Unlock()
			if np == nil {
				continue
			}
			for { // edge-triggered: read all there is
				m, err := syscall.Read(np.fd, buf[:])
				if m > 0 {
					for _, b := range buf[:m] {
						np.onByte(b)
					}
					continue
				}
				if err == syscall.EINTR {
					continue
				}
				if err != syscall.EAGAIN { // the end (or a broken pipe)
					np.ended <- pipeEnd{time.Now().UnixNano(), c.stopped, true}
					c.mu.Lock()
					delete(c.pipes, ev.Fd)
					c.mu.Unlock()
					syscall.Close(np.fd) // also leaves the epoll set
				}
				break
			}
		}
	}
}
