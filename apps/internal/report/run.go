package report

import (
	"fmt"
	"os"

	"github.com/rmago/rmago/rma"
)

// Run is what an app's main does once its flags are parsed: it joins the
// job (rma.Init), runs body as this rank, and prints rank 0's result (a
// line, or JSON with asJSON). It exits non-zero, naming the app (and the
// rank), if joining, the body or closing the world fails, or if the result
// is not verified (rank 0 prints why on stderr). body builds the Result on
// every rank; only rank 0's is printed.
func Run(app string, asJSON bool, body func(w *rma.World) (r *Result, why string, err error)) {
	w, err := rma.Init()
	if err != nil {
		fmt.Fprintln(os.Stderr, app+":", err)
		os.Exit(1)
	}
	r, why, err := body(w)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: rank %d: %v\n", app, w.Rank(), err)
		os.Exit(1)
	}
	if w.Rank() == 0 {
		r.Write(os.Stdout, asJSON)
		if !r.Verified {
			fmt.Fprintln(os.Stderr, app+":", why)
		}
	}
	if err := w.Close(); err != nil {
		fmt.Fprintln(os.Stderr, app+":", err)
		os.Exit(1)
	}
	if !r.Verified {
		os.Exit(1)
	}
}
