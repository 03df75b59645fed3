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

// stubProvider stands in for the libibverbs provider in builds without it.
type stubProvider struct{}

// Devices always fails with an error wrapping verbs.ErrNoDevice.
func (stubProvider) Devices() ([]verbs.DeviceAttr, error) { return nil, errNotBuilt }

// Open always fails with an error wrapping verbs.ErrNoDevice.
func (stubProvider) Open(string, verbs.Config) (verbs.Context, error) { return nil, errNotBuilt }

func init() { verbs.Register("ibv", stubProvider{}) }
