// Command faultrank is one rank of a fault-injection job (make
// test-faults): it joins the job (started by faultrun, or by rmarun, with
// the RMAGO_* environment), runs epochs of one synchronization mode in
// which every rank writes to every rank data whose every word it can check,
// and reports what happened as FAULTRANK lines on standard output (package
// ci/faults): ready, the faulty rank's fault point, the first error
// (classified, with the ranks it names and when), the verification of its
// window, and the end of Close.
//
// Usage:
//
//	faultrank -mode fence|pscw|lock|lockall [-epochs N] [-words K]
//	          [-fault F -faulty R -at E] [-ack] [-selfstop] [-burst B] [-hold] [-maxtime D]
//
// The faulty rank, on reaching epoch E, prints the fault line; then for
// -fault close it calls World.Close at once, for -fault stopread it stops
// reading its connections and calls nothing more, and for the other faults
// it goes on (faultrun signals it; with -selfstop a stop or stopcont rank
// stops itself there). With -ack, the faulty rank of those other faults
// waits, after its fault line, for one byte on standard input (faultrun's
// acknowledgement) before it goes on, so that the job cannot end before
// the driver has seen the fault point. With -hold, a rank that got an error
// waits until its standard input is closed before it calls Close: faultrun
// closes it once every survivor has reported, so that no survivor's
// leaving the job is what another survivor sees first. With -burst B the other ranks put their
// slot B times to the faulty rank in every epoch from E on, so that a rank
// that stopped reading has its socket buffers filled.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"
	"time"

	"github.com/rmago/rmago/ci/faults"
	"github.com/rmago/rmago/rma"
)

func main() {
	os.Exit(run())
}

type config struct {
	mode    faults.Mode
	epochs  int
	words   int
	fault   faults.Fault
	faulty  int
	at      int
	burst   int
	maxTime time.Duration
	hold    bool
	self    bool // stop and stopcont: the rank stops itself at the fault point
	ack     bool // the faulty rank waits for the driver's byte after its fault line
}

func run() int {
	var c config
	var mode, fault string
	flag.StringVar(&mode, "mode", "fence", "synchronization of the epochs: fence, pscw, lock or lockall")
	flag.IntVar(&c.epochs, "epochs", 10, "epochs to run (the job's ranks stop earlier at an error)")
	flag.IntVar(&c.words, "words", 512, "8-byte words each rank writes to each rank per epoch")
	flag.StringVar(&fault, "fault", "", "fault of the faulty rank (see package ci/faults); empty: none")
	flag.IntVar(&c.faulty, "faulty", -1, "the faulty rank")
	flag.IntVar(&c.at, "at", faults.FirstEpoch+2, "epoch at which the faulty rank reaches its fault point")
	flag.IntVar(&c.burst, "burst", 0, "from epoch -at on, put the slot this many times to the faulty rank")
	flag.DurationVar(&c.maxTime, "maxtime", time.Minute, "end the epoch loop after this long (a rank that sees no error by then reports so)")
	flag.BoolVar(&c.self, "selfstop", false, "with -fault stop or stopcont, the faulty rank stops itself (SIGSTOP) right after its fault line, at the start of epoch -at, instead of being stopped by faultrun a moment later")
	flag.BoolVar(&c.ack, "ack", false, "the faulty rank of a fault faultrun makes (kill9, stop, stopcont, pause) waits, after its fault line, for one byte on standard input before it goes on")
	flag.BoolVar(&c.hold, "hold", false, "after an error, wait until standard input is closed before calling Close (so that this rank's leaving is not what its peers see)")
	flag.Parse()
	c.mode, c.fault = faults.Mode(mode), faults.Fault(fault)
	switch {
	case !c.mode.Valid():
		return usage("unknown -mode %q", mode)
	case c.fault != "" && !c.fault.Valid():
		return usage("unknown -fault %q", fault)
	case c.words < 1 || c.words > faults.MaxK:
		return usage("-words must be in 1..%d", faults.MaxK)
	case c.epochs < 1 || c.epochs > faults.MaxEpochs:
		return usage("-epochs must be in 1..%d", faults.MaxEpochs)
	}

	start := time.Now()
	rep := &reporter{rank: -1}
	w, err := rma.Init()
	if err != nil {
		rep.fail(0, "init", err)
		return 1
	}
	rep.rank = w.Rank()
	if w.Size() > faults.MaxRanks {
		rep.fail(0, "init", fmt.Errorf("job of %d ranks: at most %d", w.Size(), faults.MaxRanks))
		return 1
	}
	j, err := newJob(w, c)
	if err != nil {
		rep.fail(0, "alloc", err)
		rep.closed(w.Close())
		return 1
	}
	rep.emit(faults.Event{Kind: faults.EvReady})

	var check faults.Check
	var failed error
	completed := -1 // the last epoch known complete at this rank's window
	last := faults.FirstEpoch + c.epochs - 1
	e := faults.FirstEpoch
	for ; e <= last; e++ {
		if j.me == c.faulty && e == c.at && c.fault != "" {
			switch c.fault {
			case faults.Close:
				rep.emit(faults.Event{Kind: faults.EvFault, Epoch: e, Phase: "Close"})
				rep.closed(w.Close())
				return 0
			case faults.StopRead:
				// The fault line follows the fact: if the sockets could not
				// be taken out, the driver sees this rank end without it.
				n, err := stopReading()
				if err == nil && n == 0 {
					err = errors.New("no socket found")
				}
				if err != nil {
					rep.emit(faults.Event{Kind: faults.EvError, Epoch: e, Phase: "stopread", Err: "could not stop reading: " + err.Error(), Class: faults.ClassOther})
					return 1
				}
				rep.emit(faults.Event{Kind: faults.EvFault, Epoch: e, Phase: fmt.Sprintf("stopped reading %d sockets", n)})
				time.Sleep(c.maxTime) // alive, silent, reading nothing, until killed
				return 0
			default:
				rep.emit(faults.Event{Kind: faults.EvFault, Epoch: e})
				if c.ack {
					awaitAck(c.maxTime)
				}
				if c.self && (c.fault == faults.Stop || c.fault == faults.StopCont) {
					stopSelf()
				}
			}
		}
		if time.Since(start) > c.maxTime {
			failed = fmt.Errorf("no error after %v (epoch %d)", c.maxTime, e)
			rep.emit(faults.Event{Kind: faults.EvError, Epoch: e, Phase: "epoch", Err: failed.Error(), Class: faults.ClassOther})
			break
		}
		ck, err := j.epoch(e)
		check.Add(ck)
		if err == nil && (c.mode == faults.Fence || c.mode == faults.PSCW) {
			completed = e // the epoch's Fence or Wait returned: it is complete here
		}
		if err != nil {
			failed = err
			rep.fail(e, "epoch", err)
			break
		}
		if ck.Corrupt != 0 {
			failed = errCorrupt
			rep.emit(faults.Event{Kind: faults.EvError, Epoch: e, Phase: "epoch", Err: "corrupt data: " + ck.First, Class: faults.ClassCorrupt})
			break
		}
	}
	if failed == nil {
		// Every rank's last epoch is complete at every target after a
		// barrier (lock modes: the targets take no part in the epochs).
		if err := w.Barrier(); err != nil {
			failed = err
			rep.fail(last, "final", err)
		} else {
			check.Add(j.layout.ExactFinal(j.win.Local(), j.me, last))
			rep.emit(faults.Event{Kind: faults.EvDone, Epoch: last})
		}
	}
	if failed != nil && !errors.Is(failed, errCorrupt) {
		check.Add(j.settled(c.faulty, completed))
	}
	rep.emit(faults.Event{Kind: faults.EvVerify, Epoch: min(e, last), Checked: check.Checked, Corrupt: check.Corrupt, First: check.First})
	if failed != nil && c.hold {
		hold(c.maxTime)
	}
	rep.closed(w.Close())
	if failed != nil {
		return 1
	}
	return 0
}

var errCorrupt = errors.New("corrupt data")

// awaitAck waits for one byte on standard input (the driver has seen the
// fault line), or for at most d.
func awaitAck(d time.Duration) {
	done := make(chan struct{})
	go func() {
		var b [1]byte
		os.Stdin.Read(b[:])
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}

// hold waits until standard input reaches its end (faultrun closes it once
// every survivor has reported its error), or for at most d.
func hold(d time.Duration) {
	done := make(chan struct{})
	go func() {
		io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(d):
	}
}

func usage(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "faultrank: "+format+"\n", args...)
	flag.Usage()
	return 2
}

// stopSelf stops this process at once. A SIGSTOP sent to the process
// (kill(2)) is taken by whichever thread the kernel picks, often another
// one, and the calling thread runs on until that thread starts the group
// stop: on shm a rank ran its last 8 epochs and the final barrier in that
// window. Sent to the calling thread itself (tgkill(2), the goroutine
// locked to it), the signal is taken as the system call returns.
func stopSelf() {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	syscall.Tgkill(syscall.Getpid(), syscall.Gettid(), syscall.SIGSTOP)
}
