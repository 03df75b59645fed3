package main

import (
	"os"
	"sync"
	"time"

	"github.com/rmago/rmago/ci/faults"
)

// reporter prints a rank's events as FAULTRANK lines, each with one write.
type reporter struct {
	mu   sync.Mutex
	rank int
}

// emit stamps e with the rank and the time (unless set) and prints it.
func (r *reporter) emit(e faults.Event) {
	if e.Time == 0 {
		e.Time = time.Now().UnixNano()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Rank = r.rank
	os.Stdout.Write(e.Line())
}

// fail reports the first error the library returned, classified, with the
// time it was returned (taken before anything else).
func (r *reporter) fail(epoch int, phase string, err error) {
	now := time.Now().UnixNano()
	msg := err.Error()
	r.emit(faults.Event{Kind: faults.EvError, Time: now, Epoch: epoch, Phase: phase, Err: msg,
		Class: faults.Classify(err), Names: faults.NamedRanks(msg)})
}

// closed reports the end of World.Close.
func (r *reporter) closed(err error) {
	e := faults.Event{Kind: faults.EvClosed, Phase: "close"}
	if err != nil {
		e.Err, e.Class, e.Names = err.Error(), faults.Classify(err), faults.NamedRanks(err.Error())
	}
	r.emit(e)
}
