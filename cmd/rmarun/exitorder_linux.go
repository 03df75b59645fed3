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
// failure is reported as the cause.
type exitClock struct {
	once  sync.Once
	epfd  int
	err   error
	mu    sync.Mutex
	pipes map[int32]*notifyPipe // by read descriptor
}

// epollET is EPOLLET as a uint32 (the syscall package's constant is negative).
const epollET = 1 << 31

// A notifyPipe is the read end of a rank's notify pipe.
type notifyPipe struct {
	fd     int
	onByte func(byte)
	ended  chan int64 // receives the time of the end
}

// pipe makes a notify pipe and returns its write end, for the rank, and a
// channel that receives the time the pipe ends. onByte is called, from
// the clock's goroutine, with each byte the rank writes.
func (c *exitClock) pipe(onByte func(byte)) (*os.File, <-chan int64, error) {
	c.once.Do(func() {
		c.epfd, c.err = syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if c.err == nil {
			c.pipes = make(map[int32]*notifyPipe)
			go c.loop()
		}
	})
	if c.err != nil {
		return nil, nil, c.err
	}
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, err
	}
	syscall.SetNonblock(p[0], true) // the read end's own file description
	np := &notifyPipe{fd: p[0], onByte: onByte, ended: make(chan int64, 1)}
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
					np.ended <- time.Now().UnixNano()
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
