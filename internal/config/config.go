// Package config reads and checks rmago's user-facing settings: the
// RMAGO_* environment variables that tune a job (provider, device,
// timeout, connection mode, polling). Load parses them all at once, fills
// in the defaults, and turns a bad value into one error that names the
// variable, the value and what is accepted, so that rma.Init fails at once
// rather than a layer below misreading it later. Vars lists every RMAGO_*
// variable the project reads, the launcher's contract (internal/launch)
// and the test-only ones included; docs/config.md is that table.
//
// Packages below transport never read the environment: transport copies
// the settings into verbs.Config for the providers.
package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Names of the user-facing settings (Kind Setting in Vars).
const (
	// EnvProvider selects the verbs provider.
	EnvProvider = "RMAGO_PROVIDER"
	// EnvDevice names the provider's device.
	EnvDevice = "RMAGO_DEVICE"
	// EnvNetDev names a network interface whose RDMA device is used.
	EnvNetDev = "RMAGO_NETDEV"
	// EnvTimeout bounds every blocking wait.
	EnvTimeout = "RMAGO_TIMEOUT"
	// EnvConnect says when pairs of ranks are connected.
	EnvConnect = "RMAGO_CONNECT"
	// EnvSoftSpin is how long the soft provider polls before it sleeps.
	EnvSoftSpin = "RMAGO_SOFT_SPIN"
	// EnvShmSpin is how long the shm provider's completion wait polls
	// before it sleeps on its futex.
	EnvShmSpin = "RMAGO_SHM_SPIN"
	// EnvShmCMA says whether the shm provider reaches node-local memory
	// that is not shared (created windows) with cross-memory attach
	// (process_vm_readv/writev) or through its owner.
	EnvShmCMA = "RMAGO_SHM_CMA"
	// EnvTCPCongestion is the TCP congestion control of the soft
	// provider's connections.
	EnvTCPCongestion = "RMAGO_TCP_CONGESTION"
	// EnvIBVSpin fixes how many times the ibv provider polls before it sleeps.
	EnvIBVSpin = "RMAGO_IBV_SPIN"
	// EnvPMI selects the PMI wire under a PMI launcher.
	EnvPMI = "RMAGO_PMI"
	// EnvNode overrides the rank's node identity (transport.LocalNode).
	EnvNode = "RMAGO_NODE"
	// EnvFence says how a fence's first round runs among 3 to 7 ranks
	// over the network: all-to-all or gathered through rank 0.
	EnvFence = "RMAGO_FENCE"
)

// Defaults of the settings that have one.
const (
	DefaultProvider = "auto"
	DefaultTimeout  = 2 * time.Minute
	DefaultConnect  = "lazy"
	DefaultFence    = "auto"
	// DefaultSoftSpin equals verbs/soft's DefaultSpin (a test checks it).
	DefaultSoftSpin = 100 * time.Microsecond
	// DefaultShmSpin equals verbs/shm's DefaultSpin (a test checks it).
	// On a node with more ranks than cores the provider yields the core
	// to other processes between its polls.
	DefaultShmSpin = time.Millisecond
	// AdaptiveSpin is Settings.IBVSpin when RMAGO_IBV_SPIN is unset: each
	// completion queue adapts its busy phase.
	AdaptiveSpin = -1
	DefaultPMI   = 1
)

// ErrConfig means a setting holds a value rmago does not accept. The error
// that wraps it names the variable, the value and the accepted values.
var ErrConfig = errors.New("config: bad setting")

// Settings are the user-facing settings, parsed, checked and defaulted.
type Settings struct {
	Provider string        // RMAGO_PROVIDER: auto, soft or ibv
	Device   string        // RMAGO_DEVICE: "" lets the provider choose
	NetDev   string        // RMAGO_NETDEV: "" for none
	Timeout  time.Duration // RMAGO_TIMEOUT: 0 means no bound
	Connect  string        // RMAGO_CONNECT: lazy or eager
	SoftSpin time.Duration // RMAGO_SOFT_SPIN: 0 never polls
	ShmSpin  time.Duration // RMAGO_SHM_SPIN: 0 sleeps at once
	ShmCMA   bool          // RMAGO_SHM_CMA: cross-memory attach for memory that is not shared
	IBVSpin  int           // RMAGO_IBV_SPIN: polls, or AdaptiveSpin
	PMI      int           // RMAGO_PMI: 1 or 2
	Fence    string        // RMAGO_FENCE: auto, all or gather
	// TCPCongestion is RMAGO_TCP_CONGESTION: "" for the provider's
	// default, "system" or an algorithm's name.
	TCPCongestion string

	// SoftSpinSet: RMAGO_SOFT_SPIN was given. Unset, a node with more
	// ranks than cores does not poll (transport).
	SoftSpinSet bool
	// ShmSpinSet: RMAGO_SHM_SPIN was given. Unset, the shm provider polls
	// for its default (DefaultShmSpin).
	ShmSpinSet bool
}

// Defaults returns the settings of an empty environment.
func Defaults() Settings {
	return Settings{
		Provider: DefaultProvider,
		Timeout:  DefaultTimeout,
		Connect:  DefaultConnect,
		SoftSpin: DefaultSoftSpin,
		ShmSpin:  DefaultShmSpin,
		ShmCMA:   true,
		IBVSpin:  AdaptiveSpin,
		PMI:      DefaultPMI,
		Fence:    DefaultFence,
	}
}

// FromEnv is Load(os.Getenv).
func FromEnv() (Settings, error) { return Load(os.Getenv) }

// Load reads every setting through getenv (nil: os.Getenv); an empty
// value is an unset one. Each bad value is an error wrapping ErrConfig;
// all of them are reported, joined, with the defaults in their place.
func Load(getenv func(string) string) (Settings, error) {
	if getenv == nil {
		getenv = os.Getenv
	}
	s := Defaults()
	var errs []error
	for _, v := range Vars {
		if v.Kind != Setting {
			continue
		}
		if val := getenv(v.Name); val != "" {
			errs = append(errs, s.Set(v.Name, val))
		}
	}
	return s, errors.Join(errs...)
}

// Set parses value as the setting name and stores it in s; transport uses
// it for explicit Options too, so that they are checked as the
// environment is. A bad value leaves s as it was and returns an error
// wrapping ErrConfig.
func (s *Settings) Set(name, value string) error {
	switch name {
	case EnvProvider:
		if !slices.Contains(Providers, value) {
			return bad(name, value)
		}
		s.Provider = value
	case EnvDevice:
		s.Device = value
	case EnvNetDev:
		s.NetDev = value
	case EnvTimeout:
		d, err := time.ParseDuration(value)
		if err != nil || d < 0 {
			return bad(name, value)
		}
		s.Timeout = d
	case EnvConnect:
		if value != "lazy" && value != "eager" {
			return bad(name, value)
		}
		s.Connect = value
	case EnvFence:
		if value != "auto" && value != "all" && value != "gather" {
			return bad(name, value)
		}
		s.Fence = value
	case EnvSoftSpin:
		d, err := time.ParseDuration(value)
		if err != nil || d < 0 {
			return bad(name, value)
		}
		s.SoftSpin, s.SoftSpinSet = d, true
	case EnvShmSpin:
		d, err := time.ParseDuration(value)
		if err != nil || d < 0 {
			return bad(name, value)
		}
		s.ShmSpin, s.ShmSpinSet = d, true
	case EnvShmCMA:
		if value != "on" && value != "off" {
			return bad(name, value)
		}
		s.ShmCMA = value == "on"
	case EnvTCPCongestion:
		if !congestionName(value) {
			return bad(name, value)
		}
		s.TCPCongestion = value
	case EnvIBVSpin:
		n, err := strconv.Atoi(value)
		if err != nil || n < 0 {
			return bad(name, value)
		}
		s.IBVSpin = n
	case EnvPMI:
		if value != "1" && value != "2" {
			return bad(name, value)
		}
		s.PMI = int(value[0] - '0')
	case EnvNode:
		// Free-form; transport.LocalNode reads it where the node is named.
	default:
		return fmt.Errorf("%w: %s is not a setting (docs/config.md lists them)", ErrConfig, name)
	}
	return nil
}

// congestionName reports whether value can name a Linux TCP congestion
// control algorithm: 1-15 lower-case letters, digits, '_' or '-' (whether
// the host offers it, the soft provider checks when it opens).
func congestionName(value string) bool {
	if len(value) == 0 || len(value) > 15 {
		return false
	}
	for _, r := range value {
		if !('a' <= r && r <= 'z' || '0' <= r && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

// Providers are the accepted values of RMAGO_PROVIDER.
var Providers = []string{"auto", "soft", "ibv", "shm"}

// bad is the error for a value name does not accept: it quotes the
// accepted values from Vars.
func bad(name, value string) error {
	v, _ := Lookup(name)
	return fmt.Errorf("%w: %s=%q: accepted: %s", ErrConfig, name, value, strings.TrimSuffix(v.Accepted, "."))
}
