package main

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// stopReading makes this process a peer that stops reading while staying
// alive: every TCP socket it has (the fabric's connections and listener) is
// taken out of every epoll set of the process (the Go runtime's, and the
// soft provider's own, where its connections are), so the goroutines that
// read them (the soft provider's reader goroutines, the "NIC") are never
// woken again, and nothing else reads them once the caller stops calling
// the library.
// The kernel goes on accepting the peers' bytes until the socket buffers
// are full, then the peers' writes block: the network sees a stalled host.
// The process must run with RMAGO_SOFT_SPIN=0 (no goroutine polls the
// sockets without epoll). It returns the number of sockets taken out.
func stopReading() (int, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return 0, err
	}
	var epolls, socks []int
	for _, ent := range ents {
		fd, err := strconv.Atoi(ent.Name())
		if err != nil {
			continue
		}
		link, err := os.Readlink("/proc/self/fd/" + ent.Name())
		if err != nil {
			continue
		}
		switch {
		case link == "anon_inode:[eventpoll]":
			epolls = append(epolls, fd)
		case strings.HasPrefix(link, "socket:"):
			if typ, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_TYPE); err == nil && typ == syscall.SOCK_STREAM {
				socks = append(socks, fd)
			}
		}
	}
	if len(epolls) == 0 {
		return 0, errors.New("no epoll instance in /proc/self/fd")
	}
	n := 0
	for _, s := range socks {
		for _, ep := range epolls {
			if syscall.EpollCtl(ep, syscall.EPOLL_CTL_DEL, s, &syscall.EpollEvent{}) == nil {
				n++
			}
		}
	}
	return n, nil
}
