package ibv

import (
	"errors"
	"testing"

	"github.com/rmago/rmago/verbs"
)

// On a host without RDMA (like the development machine), discovery is
// empty and quiet and the provider reports verbs.ErrNoDevice, in every build.
func TestNoDeviceHost(t *testing.T) {
	devs, err := SysDevices()
	if err != nil {
		t.Fatalf("SysDevices: %v", err)
	}
	if len(devs) > 0 {
		t.Skipf("host has RDMA devices: %+v", devs)
	}
	if Available("", "") {
		t.Errorf("Available() = true with no devices")
	}
	if _, err := DefaultDevice(""); !errors.Is(err, verbs.ErrNoDevice) {
		t.Errorf("DefaultDevice: %v, want ErrNoDevice", err)
	}
	if !providerBuilt {
		return // without the tag no provider is registered (TestStubProvider)
	}
	p, err := verbs.Lookup("ibv")
	if err != nil {
		t.Fatalf("ibv not registered: %v", err)
	}
	d, ok := p.(verbs.Discoverer)
	if !ok || d.Kind() != verbs.KindHardware {
		t.Fatalf("ibv is not a hardware verbs.Discoverer")
	}
	for _, dev := range []string{"", "mlx5_0"} {
		if err := d.Usable(dev); !errors.Is(err, verbs.ErrNoDevice) {
			t.Errorf("Usable(%q): %v, want ErrNoDevice", dev, err)
		}
	}
	if cs := verbs.Discover(""); len(cs) == 0 || cs[0].Name != "ibv" || !errors.Is(cs[0].Err, verbs.ErrNoDevice) {
		t.Errorf("Discover: %+v, want ibv first, unusable", cs)
	}
	if _, err := p.Devices(); !errors.Is(err, verbs.ErrNoDevice) {
		t.Errorf("Devices: %v, want ErrNoDevice", err)
	}
	if _, err := p.Open("", verbs.Config{GIDIndex: -1}); !errors.Is(err, verbs.ErrNoDevice) {
		t.Errorf("Open: %v, want ErrNoDevice", err)
	}
	if _, err := p.Open("mlx5_0", verbs.Config{GIDIndex: -1}); !errors.Is(err, verbs.ErrNoDevice) {
		t.Errorf("Open(mlx5_0): %v, want ErrNoDevice", err)
	}
}

// In the softroce VM, discovery finds rxe0 on dummy0.
func TestSysDevicesListed(t *testing.T) {
	devs, _ := SysDevices()
	if len(devs) == 0 {
		t.Skip("no RDMA devices")
	}
	for _, d := range devs {
		t.Logf("%+v usable=%v", d, d.Usable())
		if d.Name == "" || len(d.Ports) == 0 || d.Ports[0].Num != 1 {
			t.Errorf("implausible device %+v", d)
		}
	}
	if name, err := DefaultDevice(""); err != nil || name == "" {
		t.Errorf("DefaultDevice: %q, %v", name, err)
	}
	for _, d := range devs {
		for _, nd := range d.NetDevs {
			if got, err := DefaultDevice(nd); err != nil || got != d.Name {
				t.Errorf("netdev %s selects %q, %v; want %s", nd, got, err, d.Name)
			}
		}
	}
}

func TestSelectDevice(t *testing.T) {
	devs := []SysDevice{
		{Name: "mlx5_0", NetDevs: []string{"eth0"}, Ports: []SysPort{{Num: 1, State: "DOWN", LinkLayer: "Ethernet"}}, UVerbs: "/dev/infiniband/uverbs0"},
		{Name: "mlx5_1", NetDevs: []string{"eth1"}, Ports: []SysPort{{Num: 1, State: "ACTIVE", LinkLayer: "Ethernet"}}, UVerbs: "/dev/infiniband/uverbs1"},
		{Name: "rxe0", NetDevs: []string{"dummy0"}, Ports: []SysPort{{Num: 1, State: "ACTIVE", LinkLayer: "Ethernet"}}},
	}
	for _, c := range []struct {
		name, netdev, want string
		ok                 bool
	}{
		{"", "", "mlx5_1", true}, // first usable
		{"mlx5_0", "", "mlx5_0", true},
		{"rxe0", "eth1", "rxe0", true}, // the device name wins
		{"", "dummy0", "rxe0", true},
		{"", "eth0", "mlx5_0", true},
		{"mlx5_9", "", "", false},
		{"", "no-such-netdev0", "", false},
	} {
		got, err := selectDevice(devs, c.name, c.netdev)
		if got != c.want || (err == nil) != c.ok || (err != nil && !errors.Is(err, verbs.ErrNoDevice)) {
			t.Errorf("selectDevice(%q, %q) = %q, %v; want %q ok=%v", c.name, c.netdev, got, err, c.want, c.ok)
		}
	}
	if got, err := selectDevice(nil, "", ""); err == nil || !errors.Is(err, verbs.ErrNoDevice) {
		t.Errorf("no devices: %q, %v", got, err)
	}
	// No usable device: fall back to the first one.
	if got, _ := selectDevice(devs[:1], "", ""); got != "mlx5_0" {
		t.Errorf("fallback: %q", got)
	}
	if devs[2].Usable() || !devs[1].Usable() || devs[0].Usable() {
		t.Errorf("Usable wrong")
	}
}
