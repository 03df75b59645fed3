package transport

import (
	"fmt"
	"os"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/verbs"
	"github.com/rmago/rmago/verbs/ibv"    // real RDMA (libibverbs, build tag ibv)
	_ "github.com/rmago/rmago/verbs/soft" // the embedded default provider
)

// openProvider picks and opens the provider: soft, ibv, or auto (ibv when a
// usable device exists, else soft with a one-line notice).
func (f *Fabric) openProvider(b Bootstrap, s config.Settings, notice func(string)) (string, error) {
	name, device := s.Provider, s.Device
	cfg := providerConfig(b, s, f.timeout)
	switch name {
	case "", "auto":
		// rdmamap looks for RDMA devices in sysfs; ibv is used when one is
		// usable and the provider is compiled in.
		if ibv.Available(device, s.NetDev) {
			var err error
			if f.ctx, err = verbs.Open("ibv", device, cfg); err == nil {
				return "ibv", nil
			}
		}
		if notice == nil {
			notice = func(s string) { fmt.Fprintln(os.Stderr, s) }
		}
		if b.Rank() == 0 {
			notice("rmago: no usable RDMA device; using the soft (TCP) provider")
		}
		name = "soft"
		device = ""
	}
	var err error
	if f.ctx, err = verbs.Open(name, device, cfg); err != nil {
		return "", fmt.Errorf("%w: %s: %w", ErrProvider, name, err)
	}
	return name, nil
}
