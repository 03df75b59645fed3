package rma

import "github.com/rmago/rmago/sync/control"

// newProtocols builds a window's lock and PSCW protocols over its control region.
func newProtocols(c *control.Region) (lockProtocol, pscwProtocol) {
	return nil, nil // wired to sync/lock and sync/pscw
}
