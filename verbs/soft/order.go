package soft

import "sync/atomic"

// wireOrder carries the happens-before edges that the wire itself provides
// but that Go's memory model (and its race detector) cannot see through a
// socket: everything a goroutine did before posting a request happens before
// the responder executes it, and everything the responder did to memory
// happens before the requester sees the completion. A release is an atomic
// add, an acquire an atomic load, each a few nanoseconds beside a system call.
var wireOrder atomic.Uint64

func release() { wireOrder.Add(1) }
func acquire() { wireOrder.Load() }

// SyncMemory orders the responder's changes to registered memory before the
// caller's next reads (verbs.MemorySyncer).
func (c *device) SyncMemory() { acquire() }
