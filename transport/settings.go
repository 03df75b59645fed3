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

// pollRanksPerCPU is the most ranks a CPU at which a soft rank polls by
// default. Measured on 2 cores (one-to-many fence3, 8 B, three alternating
// rounds, 2026-11-28): N = 3 373-389 µs a round trip not polling, 231-235
// polling; N = 4 728-740 against 428-454. Beyond two a CPU polling hurt
// (32 ranks of apps/lockmix took 2.3 times as long, 2026-11-26).
//
// Polling at three and four ranks on 2 cores had been turned off for the
// fault suite's sake too: with its three jobs at once, survivors of a
// rank's early Close learnt of it late (16 of 1637 survivors, 2026-11-26;
// 4 of 24 trials 4.5-8.3 s after the Close, 2026-11-28). The cause was the
// soft waiter's clock: while frames kept coming it never looked at its
// deadline, and the closing rank's 3 s barrier lasted as long as the
// others kept locking its words (soft's spinCheck). With that fixed, 60
// trials of those faults polling came within 4.08 s.
//
// A rank that polls and then computes, or sleeps in a lock's backoff,
// leaves its sockets to the soft sleeper after at most the spin time
// (sleepRecheck): apps/lockmix at 4 ranks, which turned 1.7-1.9x slower
// when polling was turned on with the sleeper's old 1 ms recheck, is about
// as fast polling as not with 100 µs (2846-3837 against 3422-3786 locks/s).
const pollRanksPerCPU = 2

// providerConfig is what the provider is opened with: the bootstrap's
// address and secret, and the settings that concern providers (which
// never read the environment themselves). A provider bounds a write to a
// peer that takes no data, and a frame a peer stops sending halfway, by
// the same timeout as every wait.
//
// ranks share this rank's cpus (internal/launch.CPUShare). With more ranks
// than CPUs (verbs.Config.ShareCores) a polling rank gives its core to
// other processes between polls (sched_yield), and a soft rank polls only
// up to pollRanksPerCPU ranks a CPU unless RMAGO_SOFT_SPIN says otherwise.
// (Polling with Go's own yields took 940 µs at N = 3.) The shm provider
// polls for its default (RMAGO_SHM_SPIN unset) on any node, yielding the
// core to other processes between polls when the cores are shared: its
// wait ends by itself after 1 ms, where soft's spinner keeps polling as
// long as frames come.
func providerConfig(b Bootstrap, s config.Settings, timeout time.Duration, ranks, cpus int) verbs.Config {
	share := ranks > cpus
	cfg := verbs.Config{Addr: b.Addr(), Secret: b.Secret(), GIDIndex: -1, Timeout: timeout, NetDev: s.NetDev, Spin: s.SoftSpin, ShareCores: share}
	if s.SoftSpin == 0 || (ranks > pollRanksPerCPU*cpus && !s.SoftSpinSet) {
		cfg.Spin = -1 // never poll
	}
	cfg.ShmNoCMA = !s.ShmCMA
	cfg.TCPCongestion = s.TCPCongestion
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
