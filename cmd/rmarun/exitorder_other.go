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

func (c *exitClock) pipe(onByte func(byte)) (*os.File, <-chan int64, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	ended := make(chan int64, 1)
	go func() {
		var b [64]byte
		for {
			n, err := r.Read(b[:])
			for _, c := range b[:n] {
				onByte(c)
			}
			if err != nil {
				ended <- time.Now().UnixNano()
				r.Close()
				return
			}
		}
	}()
	return w, ended, nil
}
