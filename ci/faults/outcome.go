package faults

import (
	"bytes"
	"fmt"
	"time"

	json "github.com/goccy/go-json"
)

// Prefix starts every machine-readable line a rank prints on its standard
// output; the JSON of an Event follows it.
const Prefix = "FAULTRANK "

// Kinds of events a rank reports, in the order they can happen.
const (
	// EvReady: Init and the window's allocation succeeded (Time is when).
	EvReady = "ready"
	// EvFault: the faulty rank reached the fault epoch; for the driver's
	// faults it goes on running until the signal, for its own it makes the
	// fault right after this line.
	EvFault = "fault"
	// EvError: the first error the rank got from the library (Time is
	// when it was returned), classified.
	EvError = "error"
	// EvDone: every epoch succeeded and the final check ran.
	EvDone = "done"
	// EvVerify: the result of checking the rank's window after EvError or
	// EvDone (and of every check made during the epochs).
	EvVerify = "verify"
	// EvClosed: World.Close returned (Err is its error, if any).
	EvClosed = "closed"
)

// Event is one line of a rank's report.
type Event struct {
	Kind  string `json:"ev"`
	Rank  int    `json:"rank"`
	Time  int64  `json:"t"`               // Unix nanoseconds
	Epoch int    `json:"epoch,omitempty"` // epoch the rank was in
	Phase string `json:"phase,omitempty"` // what the rank was doing: init, alloc, epoch, final, close
	Err   string `json:"err,omitempty"`
	Class Class  `json:"class,omitempty"`
	Names []int  `json:"names,omitempty"` // ranks the error message names

	// EvVerify: bytes checked, bytes wrong, and the first wrong element.
	Checked int64  `json:"checked,omitempty"`
	Corrupt int64  `json:"corrupt,omitempty"`
	First   string `json:"first,omitempty"`
}

// At returns the event's time.
func (e *Event) At() time.Time { return time.Unix(0, e.Time) }

// Line encodes e as one output line, newline included.
func (e *Event) Line() []byte {
	b, err := json.Marshal(e)
	if err != nil { // cannot happen for this type
		b = fmt.Appendf(nil, `{"ev":"error","err":%q}`, err.Error())
	}
	out := make([]byte, 0, len(Prefix)+len(b)+1)
	out = append(out, Prefix...)
	out = append(out, b...)
	return append(out, '\n')
}

// ParseLine decodes a line written by Line (without its newline). It
// reports false for any other line (the rank's ordinary output).
func ParseLine(line []byte) (Event, bool) {
	var e Event
	rest, ok := bytes.CutPrefix(line, []byte(Prefix))
	if !ok || json.Unmarshal(rest, &e) != nil || e.Kind == "" {
		return Event{}, false
	}
	return e, true
}
