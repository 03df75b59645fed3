// Package faults is the shared part of rmago's fault-injection suite (make
// test-faults): the names of the faults and epoch modes, the outcome line
// a rank prints, the classification of a rank's error, and the data
// pattern the ranks write and verify.
//
// Two programs use it: faultrank (ci/faults/faultrank) is one rank of a job:
// it runs a loop of epochs of one synchronization mode, writing data whose
// every byte it can check, and at a chosen epoch the rank chosen as faulty
// either marks the point for the driver (which kills or stops it) or makes
// the fault itself (an early orderly Close, or it stops reading its
// connections). faultrun (ci/faults/faultrun) is the driver: it starts the
// ranks of each trial directly (with the environment contract of package
// internal/launch, so that it knows which process is which rank), injects
// the fault, waits a bounded time, and counts survivors that got the right
// error in time, hangs, orphan processes and corrupted bytes.
package faults

import "slices"

// Fault names the fault injected into one rank of a trial (the faulty rank).
type Fault string

// Faults.
const (
	// Kill9: the driver kills the faulty rank with SIGKILL.
	Kill9 Fault = "kill9"
	// Stop: the driver stops the faulty rank with SIGSTOP and never
	// continues it (it is killed when the trial ends).
	Stop Fault = "stop"
	// StopCont: the driver stops the faulty rank with SIGSTOP for longer
	// than any wait of its peers (the timeout and the grace a wait gives
	// failure notices), then continues it with SIGCONT; the resumed rank
	// must end too (with an error) instead of hanging.
	StopCont Fault = "stopcont"
	// Pause: the driver stops the faulty rank for a third of the wait
	// timeout, then continues it: no error is allowed, the job must finish
	// with exact data (a stall shorter than the timeout is not a failure).
	Pause Fault = "pause"
	// Close: the faulty rank calls World.Close early, in the middle of the
	// job, an orderly exit while its peers still expect it.
	Close Fault = "close"
	// StopRead: the faulty rank stops reading its connections (its sockets
	// are taken out of the Go netpoller, its main goroutine stops calling
	// the library) while it stays alive: its peers' writes to it fill the
	// socket buffers and block.
	StopRead Fault = "stopread"
	// BootSilent: during start-up, connections to the rendezvous port that
	// never send a byte are held open; the job must start and finish.
	BootSilent Fault = "boot-silent"
	// BootGarbage: during start-up, connections to the rendezvous port send
	// random bytes; the job must start and finish.
	BootGarbage Fault = "boot-garbage"
)

// AllFaults lists every fault in the order the suite runs them.
var AllFaults = []Fault{Kill9, Stop, StopCont, Close, StopRead, Pause, BootSilent, BootGarbage}

// KillsARank reports whether the fault takes the faulty rank out of the
// job: its peers must then fail with an error naming it. The other faults
// (Pause and the bootstrap faults) must leave a job that finishes normally.
func (f Fault) KillsARank() bool {
	switch f {
	case Kill9, Stop, StopCont, Close, StopRead:
		return true
	}
	return false
}

// Bootstrap reports whether the fault is made during the job's start-up
// (there is no faulty rank).
func (f Fault) Bootstrap() bool { return f == BootSilent || f == BootGarbage }

// SelfInflicted reports whether the faulty rank makes the fault itself (the
// driver only waits for it), rather than being signalled by the driver.
func (f Fault) SelfInflicted() bool { return f == Close || f == StopRead }

// Signalled reports whether the faulty rank is stopped or killed by a
// signal (from the driver, or from itself with -selfstop) after its fault
// point.
func (f Fault) Signalled() bool {
	switch f {
	case Kill9, Stop, StopCont, Pause:
		return true
	}
	return false
}

// Valid reports whether f is a known fault.
func (f Fault) Valid() bool { return slices.Contains(AllFaults, f) }

// Mode names the synchronization of the epochs a job runs.
type Mode string

// Modes.
const (
	Fence   Mode = "fence"   // Fence; every rank puts to every rank
	PSCW    Mode = "pscw"    // Post/Start/Complete/Wait with every rank
	Lock    Mode = "lock"    // exclusive Lock/Unlock of each target in turn
	LockAll Mode = "lockall" // LockAll, puts to every rank, FlushAll, UnlockAll
)

// AllModes lists every mode.
var AllModes = []Mode{Fence, PSCW, Lock, LockAll}

// Valid reports whether m is a known mode.
func (m Mode) Valid() bool { return slices.Contains(AllModes, m) }
