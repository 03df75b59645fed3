package config_test

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/verbs"
	_ "github.com/rmago/rmago/verbs/ibv"
	"github.com/rmago/rmago/verbs/shm"
	"github.com/rmago/rmago/verbs/soft"
)

func env(kv ...string) func(string) string {
	m := map[string]string{}
	for i := 0; i < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return func(k string) string { return m[k] }
}

// TestConfigDefaults: an empty environment gives the documented defaults.
func TestConfigDefaults(t *testing.T) {
	s, err := config.Load(env())
	if err != nil {
		t.Fatal(err)
	}
	want := config.Settings{Provider: "auto", Timeout: 2 * time.Minute, Connect: "lazy", SoftSpin: 100 * time.Microsecond, ShmSpin: time.Millisecond, ShmCMA: true, IBVSpin: -1, PMI: 1, Fence: "auto"}
	if s != want || s != config.Defaults() {
		t.Fatalf("defaults %+v, want %+v", s, want)
	}
	if config.DefaultShmSpin != shm.DefaultSpin {
		t.Errorf("config.DefaultShmSpin %v, shm.DefaultSpin %v", config.DefaultShmSpin, shm.DefaultSpin)
	}
	if config.DefaultSoftSpin != soft.DefaultSpin {
		t.Errorf("config.DefaultSoftSpin %v, soft.DefaultSpin %v", config.DefaultSoftSpin, soft.DefaultSpin)
	}
}

// TestConfigValues: every setting's accepted values are read exactly.
func TestConfigValues(t *testing.T) {
	s, err := config.Load(env(
		"RMAGO_PROVIDER", "soft", "RMAGO_DEVICE", "mlx5_1", "RMAGO_NETDEV", "eth2",
		"RMAGO_TIMEOUT", "0", "RMAGO_CONNECT", "eager", "RMAGO_SOFT_SPIN", "0",
		"RMAGO_IBV_SPIN", "0", "RMAGO_PMI", "2", "RMAGO_NODE", "a", "RMAGO_FENCE", "gather",
		"RMAGO_TCP_CONGESTION", "system"))
	if err != nil {
		t.Fatal(err)
	}
	want := config.Settings{Provider: "soft", Device: "mlx5_1", NetDev: "eth2", Timeout: 0, Connect: "eager", SoftSpin: 0, SoftSpinSet: true, ShmSpin: time.Millisecond, ShmCMA: true, IBVSpin: 0, PMI: 2, Fence: "gather", TCPCongestion: "system"}
	if s != want {
		t.Fatalf("got %+v, want %+v", s, want)
	}
	s, err = config.Load(env("RMAGO_PROVIDER", "ibv", "RMAGO_TIMEOUT", "1m30s", "RMAGO_SOFT_SPIN", "250us", "RMAGO_IBV_SPIN", "64", "RMAGO_PMI", "1", "RMAGO_SHM_SPIN", "0"))
	if err != nil {
		t.Fatal(err)
	}
	if s.Provider != "ibv" || s.Timeout != 90*time.Second || s.SoftSpin != 250*time.Microsecond || s.IBVSpin != 64 || s.PMI != 1 || s.ShmSpin != 0 || !s.ShmSpinSet {
		t.Fatalf("got %+v", s)
	}
}

// TestConfigBadValues: each bad value is an ErrConfig naming the
// variable, the value and the accepted values; every bad one is reported.
func TestConfigBadValues(t *testing.T) {
	cases := []struct{ name, value, accepted string }{
		{"RMAGO_PROVIDER", "verbs", "auto, soft, ibv or shm"},
		{"RMAGO_TIMEOUT", "soon", "a Go duration >= 0"},
		{"RMAGO_TIMEOUT", "-1s", "a Go duration >= 0"},
		{"RMAGO_TIMEOUT", "10", "a Go duration >= 0"},
		{"RMAGO_CONNECT", "sometimes", "lazy (on first use"},
		{"RMAGO_FENCE", "tree", "auto, all (every rank notifies every other"},
		{"RMAGO_SOFT_SPIN", "x", "a Go duration >= 0"},
		{"RMAGO_SHM_SPIN", "-1s", "a Go duration >= 0"},
		{"RMAGO_SHM_CMA", "yes", "on or off"},
		{"RMAGO_SOFT_SPIN", "-1ms", "a Go duration >= 0"},
		{"RMAGO_SOFT_SPIN", "10", "a Go duration >= 0"},
		{"RMAGO_IBV_SPIN", "-1", "an integer >= 0"},
		{"RMAGO_IBV_SPIN", "lots", "an integer >= 0"},
		{"RMAGO_TCP_CONGESTION", "Reno", "reno, system"},
		{"RMAGO_TCP_CONGESTION", "reno bbr", "reno, system"},
		{"RMAGO_TCP_CONGESTION", "sixteen_letters_", "reno, system"},
		{"RMAGO_PMI", "3", "1 or 2"},
		{"RMAGO_PMI", "x", "1 or 2"},
	}
	for _, c := range cases {
		s, err := config.Load(env(c.name, c.value))
		if !errors.Is(err, config.ErrConfig) {
			t.Fatalf("%s=%q: %v, want ErrConfig", c.name, c.value, err)
		}
		msg := err.Error()
		if !strings.Contains(msg, c.name+"=\""+c.value+"\"") || !strings.Contains(msg, "accepted: "+c.accepted) {
			t.Errorf("%s=%q: error %q does not name the variable, the value and %q", c.name, c.value, msg, c.accepted)
		}
		if s != config.Defaults() {
			t.Errorf("%s=%q: a bad value changed the settings: %+v", c.name, c.value, s)
		}
	}
	_, err := config.Load(env("RMAGO_TIMEOUT", "soon", "RMAGO_PMI", "3", "RMAGO_PROVIDER", "soft"))
	if !errors.Is(err, config.ErrConfig) || !strings.Contains(err.Error(), "RMAGO_TIMEOUT") || !strings.Contains(err.Error(), "RMAGO_PMI") {
		t.Errorf("two bad values: %v", err)
	}
	var s config.Settings
	if err := s.Set("RMAGO_RANK", "1"); !errors.Is(err, config.ErrConfig) {
		t.Errorf("Set of a contract variable: %v", err)
	}
}

// TestConfigProviders: RMAGO_PROVIDER accepts auto and exactly the
// known providers (registered, or left out of this build with a reason).
func TestConfigProviders(t *testing.T) {
	want := append([]string{"auto"}, verbs.Known()...)
	got := slices.Clone(config.Providers)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("config.Providers %v, registered %v", got, want)
	}
}
