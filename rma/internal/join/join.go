// Package join lets rmago's own test harnesses (rma/rmatest, tests of
// other packages) join a job from an explicit transport bootstrap, such as
// ranks rendezvousing as goroutines of one test, without rma's public API
// naming transport types. Package rma sets World when it initialises.
package join

import "github.com/rmago/rmago/transport"

// World joins the job b describes with opt and returns the *rma.World.
var World func(b transport.Bootstrap, opt transport.Options) (any, error)
