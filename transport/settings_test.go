package transport

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/verbs"
)

// TestConfigErrors: a bad setting fails BootstrapFromEnv (the first thing
// rma.Init does) before any peer is contacted, Open, and BootstrapPMI,
// with ErrConfig naming the variable, the value and the accepted values.
func TestConfigErrors(t *testing.T) {
	t.Setenv(EnvTimeout, "soon")
	_, err := BootstrapFromEnv()
	if !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `RMAGO_TIMEOUT="soon": accepted: a Go duration >= 0`) {
		t.Fatalf("BootstrapFromEnv with RMAGO_TIMEOUT=soon: %v", err)
	}
	t.Setenv(EnvTimeout, "")
	for name, value := range map[string]string{config.EnvSoftSpin: "x", config.EnvIBVSpin: "-3", EnvConnect: "sometimes", EnvProvider: "tcp"} {
		t.Run(name, func(t *testing.T) {
			t.Setenv(name, value)
			b, err := Rendezvous(RendezvousConfig{Rank: 0, Size: 1, Secret: []byte("0123456789abcdef"), Addr: "127.0.0.1"})
			if err != nil {
				t.Fatal(err)
			}
			want := name + `="` + value + `": accepted: `
			if _, err := Open(b, Options{}); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
				t.Errorf("Open with %s=%s: %v", name, value, err)
			}
			if _, err := BootstrapFromEnv(); !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), want) {
				t.Errorf("BootstrapFromEnv with %s=%s: %v", name, value, err)
			}
		})
	}
	_, err = BootstrapPMI(PMIConfig{Getenv: func(k string) string { return map[string]string{"PMI_FD": "3", config.EnvPMI: "3"}[k] }})
	if !errors.Is(err, ErrBootstrap) || !errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), `RMAGO_PMI="3": accepted: 1 or 2`) {
		t.Errorf("BootstrapPMI with RMAGO_PMI=3: %v", err)
	}
	_, err = openFabricsWith(t, 1, func(int) Options { return Options{Provider: "soft", Connect: "sometimes"} })
	if !errors.Is(err, ErrConfig) {
		t.Errorf("Options.Connect sometimes: %v", err)
	}
}

// TestConfigOptions: an Options field wins over its variable; unset ones
// take the environment's value, else the default.
func TestConfigOptions(t *testing.T) {
	t.Setenv(EnvTimeout, "5s")
	t.Setenv(EnvConnect, "eager")
	t.Setenv(EnvProvider, "soft")
	t.Setenv(EnvDevice, "soft0")
	for _, c := range []struct {
		opt     Options
		timeout time.Duration
		connect string
		prov    string
		dev     string
	}{
		{Options{}, 5 * time.Second, "eager", "soft", "soft0"},
		{Options{Timeout: -1, Connect: "lazy", Provider: "auto", Device: "x"}, 0, "lazy", "auto", "x"},
		{Options{Timeout: 3 * time.Second}, 3 * time.Second, "eager", "soft", "soft0"},
	} {
		s, err := settings(c.opt)
		if err != nil || s.Timeout != c.timeout || s.Connect != c.connect || s.Provider != c.prov || s.Device != c.dev {
			t.Errorf("settings(%+v) = %+v, %v", c.opt, s, err)
		}
	}
	t.Setenv(EnvTimeout, "")
	t.Setenv(EnvConnect, "")
	t.Setenv(EnvProvider, "")
	t.Setenv(EnvDevice, "")
	if s, err := settings(Options{}); err != nil || s != config.Defaults() {
		t.Errorf("settings of an empty environment: %+v, %v", s, err)
	}
}

// TestProviderConfig: the providers' settings reach verbs.Config exactly
// (the providers read no environment).
func TestProviderConfig(t *testing.T) {
	b, err := Rendezvous(RendezvousConfig{Rank: 0, Size: 1, Secret: []byte("0123456789abcdef"), Addr: "127.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	for _, c := range []struct {
		env   map[string]string
		ranks int // ranks on the node (2 cores)
		want  verbs.Config
	}{
		{nil, 2, verbs.Config{Spin: config.DefaultSoftSpin}},
		{map[string]string{config.EnvSoftSpin: "0", config.EnvIBVSpin: "0", config.EnvNetDev: "eth2", config.EnvShmSpin: "0"}, 1, verbs.Config{Spin: -1, SpinPolls: -1, NetDev: "eth2", ShmSpin: -1}},
		{map[string]string{config.EnvSoftSpin: "250us", config.EnvIBVSpin: "64", config.EnvShmSpin: "1ms"}, 2, verbs.Config{Spin: 250 * time.Microsecond, SpinPolls: 64, ShmSpin: time.Millisecond}},
		// Sharing cores: soft polls up to two ranks a CPU, and beyond
		// that only if RMAGO_SOFT_SPIN asks for it (even at its default
		// value). (ShmSpin 0: the shm provider's default.)
		{nil, 3, verbs.Config{Spin: config.DefaultSoftSpin, ShareCores: true}},
		{nil, 4, verbs.Config{Spin: config.DefaultSoftSpin, ShareCores: true}},
		{nil, 5, verbs.Config{Spin: -1, ShareCores: true}},
		{map[string]string{config.EnvSoftSpin: "100us"}, 5, verbs.Config{Spin: 100 * time.Microsecond, ShareCores: true}},
		{map[string]string{config.EnvSoftSpin: "100us"}, 4, verbs.Config{Spin: 100 * time.Microsecond, ShareCores: true}},
		{map[string]string{config.EnvShmSpin: "50us"}, 32, verbs.Config{Spin: -1, ShareCores: true, ShmSpin: 50 * time.Microsecond}},
		{map[string]string{config.EnvSoftSpin: "100us"}, 32, verbs.Config{Spin: 100 * time.Microsecond, ShareCores: true}},
		{map[string]string{config.EnvSoftSpin: "0"}, 3, verbs.Config{Spin: -1, ShareCores: true}},
	} {
		s, err := config.Load(func(k string) string { return c.env[k] })
		if err != nil {
			t.Fatal(err)
		}
		got := providerConfig(b, s, 7*time.Second, c.ranks, 2)
		c.want.Addr, c.want.Secret, c.want.GIDIndex, c.want.Timeout = "127.0.0.1", got.Secret, -1, 7*time.Second
		if string(got.Secret) != "0123456789abcdef" || got.Addr != c.want.Addr || got.GIDIndex != -1 || got.Timeout != c.want.Timeout ||
			got.NetDev != c.want.NetDev || got.Spin != c.want.Spin || got.SpinPolls != c.want.SpinPolls || got.ShareCores != c.want.ShareCores || got.ShmSpin != c.want.ShmSpin {
			t.Errorf("env %v: %+v, want %+v", c.env, got, c.want)
		}
	}
}
