// Package report prints the result of an app run: one human-readable line,
// or one JSON object (github.com/goccy/go-json) that apps/sor/sweep.sh and
// plotting scripts collect.
package report

import (
	"fmt"
	"io"
	"maps"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	json "github.com/goccy/go-json"

	"github.com/rmago/rmago/rma"
)

// Result is one measured run of an app. Seconds is the parallel run's
// wall time (the slowest rank's); SeqSeconds that of the sequential
// version of the same computation on one core; Speedup their ratio.
type Result struct {
	System   string `json:"system"` // app and variant, e.g. "sor/big": one line of a plot
	App      string `json:"app"`
	Variant  string `json:"variant"`
	Provider string `json:"provider"` // the verbs provider: soft, shm or ibv
	Device   string `json:"device"`   // its device: soft0, shm0, mlx5_0, rxe0, ...
	Ranks    int    `json:"ranks"`
	// N is the problem's size and Size says what it counts, in words:
	// "1024×1024 grid", "8000 slots".
	N    int    `json:"n"`
	Size string `json:"size"`
	// Iterations is how many times the app's step ran and IterUnit what
	// they are, in the plural ("sweeps", "keys inserted per rank").
	Iterations int     `json:"iterations"`
	IterUnit   string  `json:"iteration_unit"`
	Seconds    float64 `json:"seconds"`
	// PerIter is Seconds / Iterations, absent where iterations do not run
	// one after the other (NoPerIter).
	PerIter float64 `json:"seconds_per_iteration,omitempty"`
	// SeqSeconds and Speedup are absent for an app with no sequential
	// version (lockmix).
	SeqSeconds float64 `json:"seq_seconds,omitempty"`
	Speedup    float64 `json:"speedup,omitempty"`
	Verified   bool    `json:"verified"`
	// Load1 is the machine's one-minute load average when the run ended
	// (Linux), a hint of how much other work shared the cores.
	Load1 float64 `json:"load1,omitempty"`
	// GOMAXPROCS is the rank's (rmarun sets cores/ranks unless the
	// environment sets it).
	GOMAXPROCS int `json:"gomaxprocs"`
	// NoPerIter leaves PerIter out: the iterations run concurrently
	// (histogram's updates, hashtable's inserts), so a time per
	// iteration would mean nothing.
	NoPerIter bool `json:"-"`
	// Extra holds app-specific figures (rates, residuals).
	Extra map[string]float64 `json:"extra,omitempty"`
}

// New is a Result of app's variant run on w: its provider, device and
// ranks filled in.
func New(w *rma.World, app, variant string) *Result {
	dev := w.Provider()
	return &Result{App: app, Variant: variant, Provider: dev.Provider, Device: dev.Name, Ranks: w.Size()}
}

// Finish fills the derived fields from the two times.
func (r *Result) Finish(par, seq time.Duration) {
	r.System = r.App + "/" + r.Variant
	r.Seconds = par.Seconds()
	r.SeqSeconds = seq.Seconds()
	if r.Iterations > 0 && !r.NoPerIter {
		r.PerIter = r.Seconds / float64(r.Iterations)
	}
	if r.Seconds > 0 {
		r.Speedup = r.SeqSeconds / r.Seconds
	}
	r.Load1 = load1()
	r.GOMAXPROCS = runtime.GOMAXPROCS(0)
}

// load1 reads the one-minute load average, or 0 where there is none.
func load1() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// Write prints r to out: a JSON object on one line if asJSON, else text
// ending in "verified" (or "NOT VERIFIED").
func (r *Result) Write(out io.Writer, asJSON bool) error {
	if asJSON {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	}
	size := r.Size
	if size == "" {
		size = fmt.Sprintf("n %d", r.N)
	}
	unit := r.IterUnit
	if unit == "" {
		unit = "iterations"
	}
	s := fmt.Sprintf("%s: %d ranks (provider %s, device %s), %s, %d %s, %s", r.System, r.Ranks, r.Provider, r.Device, size, r.Iterations, unit, fmtSec(r.Seconds))
	if r.PerIter > 0 {
		s += fmt.Sprintf(" (%s per iteration)", fmtSec(r.PerIter))
	}
	if r.SeqSeconds > 0 {
		s += fmt.Sprintf(", sequential %s, speed-up %.3g", fmtSec(r.SeqSeconds), r.Speedup)
	}
	for _, k := range slices.Sorted(maps.Keys(r.Extra)) {
		s += fmt.Sprintf(", %s %.4g", k, r.Extra[k])
	}
	if r.Verified {
		s += ", verified"
	} else {
		s += ", NOT VERIFIED"
	}
	_, err := fmt.Fprintln(out, s)
	return err
}

func fmtSec(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Microsecond).String()
}
