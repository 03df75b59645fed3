package ibv

import (
	"fmt"
	"slices"
	"strings"

	"github.com/rmago/rmago/verbs"
)

// Name is the name the provider registers under (in builds with the tag).
const Name = "ibv"

// SysPort is one port of an RDMA device as sysfs shows it.
type SysPort struct {
	Num       int    // port number, from 1
	State     string // "ACTIVE", "DOWN", "INIT", ...
	LinkLayer string // "InfiniBand" or "Ethernet"
}

// Active reports whether the port is up.
func (p SysPort) Active() bool { return p.State == "ACTIVE" }

// SysDevice is an RDMA device found in sysfs (/sys/class/infiniband),
// without opening it.
type SysDevice struct {
	Name    string    // device name, e.g. "mlx5_0" or "rxe0"
	NetDevs []string  // network interfaces the device sits on, sorted
	Ports   []SysPort // its ports, by number
	UVerbs  string    // user verbs character device (/dev/infiniband/uverbsN), "" when absent
}

// Usable reports whether a process could use the device: its user verbs
// character device exists and at least one port is active.
func (d SysDevice) Usable() bool {
	if d.UVerbs == "" {
		return false
	}
	for _, p := range d.Ports {
		if p.Active() {
			return true
		}
	}
	return false
}

// SysDevices lists the RDMA devices in sysfs, sorted by name. A host
// without RDMA support yields an empty list and no error.
func SysDevices() ([]SysDevice, error) {
	devs := sysDevices()
	slices.SortFunc(devs, func(a, b SysDevice) int { return strings.Compare(a.Name, b.Name) })
	return devs, nil
}

// DefaultDevice picks the device verbs.Open("ibv", "", cfg) opens: the one
// on network interface netdev (cfg.NetDev) if it is not "", else the first
// usable device, else the first device. The error wraps verbs.ErrNoDevice.
func DefaultDevice(netdev string) (string, error) {
	devs, _ := SysDevices()
	return selectDevice(devs, "", netdev)
}

func selectDevice(devs []SysDevice, name, netdev string) (string, error) {
	if name != "" {
		for _, d := range devs {
			if d.Name == name {
				return name, nil
			}
		}
		return "", fmt.Errorf("%w: device %q not found (devices: %s)", verbs.ErrNoDevice, name, deviceNames(devs))
	}
	if netdev != "" {
		for _, d := range devs {
			if slices.Contains(d.NetDevs, netdev) {
				return d.Name, nil
			}
		}
		if dev := rdmaDeviceForNetdev(netdev); dev != "" {
			return dev, nil
		}
		return "", fmt.Errorf("%w: no RDMA device on network interface %q (devices: %s)", verbs.ErrNoDevice, netdev, deviceNames(devs))
	}
	for _, d := range devs {
		if d.Usable() {
			return d.Name, nil
		}
	}
	if len(devs) > 0 {
		return devs[0].Name, nil
	}
	return "", fmt.Errorf("%w: none in /sys/class/infiniband", verbs.ErrNoDevice)
}

func deviceNames(devs []SysDevice) string {
	if len(devs) == 0 {
		return "none"
	}
	names := make([]string, len(devs))
	for i, d := range devs {
		names[i] = d.Name
	}
	return strings.Join(names, ", ")
}

// Available reports whether the ibv provider can be used here: it was
// compiled in (build tag ibv, Linux, cgo) and the device verbs.Open("ibv",
// device, verbs.Config{NetDev: netdev}) would open is usable. It reads
// sysfs only and never prints anything. Discovery (verbs.Select) asks the
// provider itself (verbs.Discoverer).
func Available(device, netdev string) bool {
	return providerBuilt && usable(device, netdev) == nil
}

// usable reports whether device ("": the one on netdev, else the first
// usable one) is found in sysfs and usable; the error wraps
// verbs.ErrNoDevice.
func usable(device, netdev string) error {
	devs, _ := SysDevices()
	name, err := selectDevice(devs, device, netdev)
	if err != nil {
		return err
	}
	for _, d := range devs {
		if d.Name == name {
			if !d.Usable() {
				return fmt.Errorf("%w: %s has no active port or no user verbs device", verbs.ErrNoDevice, name)
			}
			return nil
		}
	}
	// Found through rdmamap's netlink lookup only: trust it.
	return nil
}
