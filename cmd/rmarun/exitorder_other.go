//go:build unix && !linux

package main

import (
	"os"
	"time"
)

// An exitClock reads the ranks' notify pipes, one goroutine each, and
// takes the time each one ends. (On Linux one epoll set times the ends in
// the kernel's order.)
type exitClock struct{}

// A pipeEnd is when a rank's notify pipe ended; whether that was after
// the stop is not known here.
type pipeEnd struct {
	when    int64 // Unix nanoseconds
	stopped bool
	known   bool
}

// markStop does nothing: the caller compares times.
func (c *exitClock) markStop() {}

func (c *exitClock) pipe(onByte func(byte)) (*os.File, <-chan pipeEnd, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	ended := make(chan pipeEnd, 1)
	go func() {
		var b [64]byte
		for {
			n, err := r.Read(b[:])
			for _, c := range b[:n] {
				onByte(c)
			}
			if err != nil {
				ended <- pipeEnd{when: time.Now().UnixNano()}
				r.Close()
				return
			}
		}
	}()
	return w, ended, nil
}
