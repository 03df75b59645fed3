package transport

import (
	"time"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/verbs"
)

// ErrConfig means an RMAGO_* setting (or an Options field standing for
// one) holds a value rmago does not accept; the error names the variable,
// the value and the accepted values. docs/config.md lists the settings.
var ErrConfig = config.ErrConfig

// settings are the job's settings for Open: the environment's, checked
// and defaulted by internal/config, with what opt gives in their place.
// An explicit provider or device name is checked by the provider itself.
func settings(opt Options) (config.Settings, error) {
	s, err := config.FromEnv()
	if err != nil {
		return s, err
	}
	if opt.Provider != "" {
		s.Provider = opt.Provider
	}
	if opt.Device != "" {
		s.Device = opt.Device
	}
	switch {
	case opt.Timeout < 0:
		s.Timeout = 0
	case opt.Timeout > 0:
		s.Timeout = opt.Timeout
	}
	if opt.Connect != "" {
		if err := s.Set(EnvConnect, opt.Connect); err != nil {
			return s, err
		}
	}
	return s, nil
}

// providerConfig is what the provider is opened with: the bootstrap's
// address and secret, and the settings that concern providers (which
// never read the environment themselves). A provider bounds a write to a
// peer that takes no data, and a frame a peer stops sending halfway, by
// the same timeout as every wait. When this rank shares its cores with
// other ranks of its node (share, internal/launch.CoresShared;
// verbs.Config.ShareCores) a soft rank
// does not poll unless RMAGO_SOFT_SPIN says so, and one that polls gives
// its core to other processes between polls (sched_yield). Polling that
// way helps a job alone on its node at up to two ranks a core (on 2 cores,
// one-to-many fence3 at N = 3 and 4: 237-262 and 403-600 µs a round trip
// against 307-322 and 637-673 not polling; 2026-11-28, sockets out of Go's
// poller: 231-235 and 428-454 against 373-389 and 728-740), but it hurts
// beyond that (32 ranks of apps/lockmix: 2.3 times as long), and with
// other jobs on the node it made failures reported later (the fault
// suite's three jobs at once, 4 ranks each on 2 cores: 16 of 1637
// survivors' errors late, or naming a rank that left after the faulty
// one, against none of 1837; 2026-11-28, close faults of 3 and 4 ranks:
// survivors of 4 trials in 24 learnt of the early Close 4.5-8.3 s after
// it, against at most 4.02 s not polling).
// (Polling with Go's own yields took 940 µs at N = 3.) The shm provider
// polls for its default (RMAGO_SHM_SPIN unset) on any node, yielding the
// core to other processes between polls when the cores are shared: its
// wait ends by itself after 1 ms, where soft's spinner keeps polling as
// long as frames come.
func providerConfig(b Bootstrap, s config.Settings, timeout time.Duration, share bool) verbs.Config {
	cfg := verbs.Config{Addr: b.Addr(), Secret: b.Secret(), GIDIndex: -1, Timeout: timeout, NetDev: s.NetDev, Spin: s.SoftSpin, ShareCores: share}
	if s.SoftSpin == 0 || (share && !s.SoftSpinSet) {
		cfg.Spin = -1 // never poll
	}
	cfg.ShmNoCMA = !s.ShmCMA
	switch {
	case !s.ShmSpinSet:
		cfg.ShmSpin = 0 // the provider's default for the node (ShareCores)
	case s.ShmSpin == 0:
		cfg.ShmSpin = -1 // sleep at once
	default:
		cfg.ShmSpin = s.ShmSpin
	}
	switch {
	case s.IBVSpin == 0:
		cfg.SpinPolls = -1 // sleep at once
	case s.IBVSpin > 0:
		cfg.SpinPolls = s.IBVSpin
	}
	return cfg
}
