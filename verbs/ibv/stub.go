//go:build !ibv || !linux || !cgo

package ibv

import (
	"fmt"

	"github.com/rmago/rmago/verbs"
)

// providerBuilt says whether the cgo libibverbs provider is compiled in.
const providerBuilt = false

// errNotBuilt explains why this build has no hardware verbs.
var errNotBuilt = fmt.Errorf("%w: the ibv provider is not compiled in; build with `go build -tags ibv` on Linux with cgo (needs libibverbs-dev)", verbs.ErrNoDevice)

// In builds without the provider, "ibv" is not registered; asking for it by
// name fails with errNotBuilt (and verbs.ErrUnknownProvider), and
// discovery does not try it.
func init() { verbs.RegisterMissing(Name, errNotBuilt) }
