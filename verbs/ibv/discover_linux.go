package ibv

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/Mellanox/rdmamap"
)

// sysDevices reads /sys/class/infiniband through rdmamap, plus the port
// state and link layer files it does not cover.
func sysDevices() []SysDevice {
	names := rdmamap.GetRdmaDeviceList()
	devs := make([]SysDevice, 0, len(names))
	for _, name := range names {
		d := SysDevice{Name: name}
		for _, cd := range rdmamap.GetRdmaCharDevices(name) {
			if strings.HasPrefix(filepath.Base(cd), rdmamap.RdmaUverbsFilxPrefix) {
				if _, err := os.Stat(cd); err == nil {
					d.UVerbs = cd
				}
			}
		}
		dir := filepath.Join(rdmamap.RdmaClassDir, name)
		nd := map[string]bool{}
		for _, ps := range rdmamap.GetPorts(name) {
			num, err := strconv.Atoi(ps)
			if err != nil {
				continue
			}
			pdir := filepath.Join(dir, rdmamap.RdmaPortsdir, ps)
			p := SysPort{Num: num, State: readState(filepath.Join(pdir, "state")), LinkLayer: readLine(filepath.Join(pdir, "link_layer"))}
			d.Ports = append(d.Ports, p)
			// The GID table names the interface of every RoCE GID.
			ents, _ := os.ReadDir(filepath.Join(pdir, rdmamap.RdmaGidAttrDir, rdmamap.RdmaGidAttrNdevDir))
			for _, e := range ents {
				if n := readLine(filepath.Join(pdir, rdmamap.RdmaGidAttrDir, rdmamap.RdmaGidAttrNdevDir, e.Name())); n != "" {
					nd[n] = true
				}
			}
		}
		// PCI devices list their interfaces under device/net; rxe and siw
		// name theirs in "parent".
		if ents, err := os.ReadDir(filepath.Join(dir, "device", "net")); err == nil {
			for _, e := range ents {
				nd[e.Name()] = true
			}
		}
		if n := readLine(filepath.Join(dir, "parent")); n != "" {
			nd[n] = true
		}
		for n := range nd {
			d.NetDevs = append(d.NetDevs, n)
		}
		slices.Sort(d.NetDevs)
		slices.SortFunc(d.Ports, func(a, b SysPort) int { return a.Num - b.Num })
		devs = append(devs, d)
	}
	return devs
}

// rdmaDeviceForNetdev asks rdmamap (netlink) for the device on an
// interface the GID tables do not name, such as an IPoIB interface.
func rdmaDeviceForNetdev(netdev string) string {
	dev, err := rdmamap.GetRdmaDeviceForNetdevice(netdev)
	if err != nil {
		return ""
	}
	return dev
}

func readLine(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// readState turns "4: ACTIVE" into "ACTIVE".
func readState(path string) string {
	s := readLine(path)
	if i := strings.IndexByte(s, ':'); i >= 0 {
		s = strings.TrimSpace(s[i+1:])
	}
	return s
}
