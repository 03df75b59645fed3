//go:build !amd64

package main

import "time"

// cyclesEpoch is the origin of cycles' count.
var cyclesEpoch = time.Now()

// cycles stands in for a cycle counter: nanoseconds on the monotonic
// clock.
func cycles() uint64 { return uint64(time.Since(cyclesEpoch)) }
