//go:build !pmix

package pmi

import "fmt"

// PMIxBuilt reports whether this binary has the PMIx client (build tag pmix).
const PMIxBuilt = false

// OpenPMIx needs the build tag pmix (and libpmix-dev).
func OpenPMIx(trace func(string)) (Client, error) {
	return nil, fmt.Errorf("%w: built without PMIx (go build -tags pmix, with libpmix-dev)", ErrPMI)
}
