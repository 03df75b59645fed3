//go:build !linux

package main

import "errors"

// stopReading is Linux only (it edits the Go runtime's epoll set).
func stopReading() (int, error) {
	return 0, errors.New("stopping reads needs Linux")
}
