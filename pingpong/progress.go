package main

import (
	"fmt"
	"io"
	"time"
)

// progress prints a line on stderr now and then during a long sweep: the
// first after a few seconds, then every few seconds, so short runs stay quiet.
type progress struct {
	on    bool
	w     io.Writer
	start time.Time
	last  time.Time
	shown bool
}

const (
	progressFirst = 3 * time.Second
	progressEvery = 5 * time.Second
)

func newProgress(on bool, w io.Writer) *progress {
	now := time.Now()
	return &progress{on: on, w: w, start: now, last: now}
}

// step reports what is running: msg names the step, done of total steps.
func (p *progress) step(msg string, done, total int) {
	if p == nil || !p.on {
		return
	}
	now := time.Now()
	wait := progressEvery
	if !p.shown {
		wait = progressFirst
	}
	if now.Sub(p.last) < wait {
		return
	}
	p.last, p.shown = now, true
	fmt.Fprintf(p.w, "pingpong: %s (%d/%d done, %s elapsed)\n", msg, done, total, now.Sub(p.start).Round(time.Second))
}

// done closes the progress report with the total time, if any line was shown.
func (p *progress) done() {
	if p == nil || !p.on || !p.shown {
		return
	}
	fmt.Fprintf(p.w, "pingpong: finished in %s\n", time.Since(p.start).Round(100*time.Millisecond))
}
