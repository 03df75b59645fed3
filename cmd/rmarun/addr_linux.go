package main

import (
	"net"
	"sort"

	"github.com/Mellanox/rdmamap"
)

// rdmaAddr returns the IPv4 address of this host's RDMA network device,
// found with rdmamap, when the route to rank 0's host (leaving from the
// address route) does not already go through one: RDMA traffic then uses
// the same network as the bootstrap. It returns "" when there is no such
// device, or when route's own interface is one.
func rdmaAddr(route string) string {
	if len(rdmamap.GetRdmaDeviceList()) == 0 {
		return ""
	}
	ifcs, err := net.Interfaces()
	if err != nil {
		return ""
	}
	sort.Slice(ifcs, func(i, j int) bool { return ifcs[i].Name < ifcs[j].Name })
	var found string
	for _, ifc := range ifcs {
		if ifc.Flags&net.FlagUp == 0 || ifc.Flags&net.FlagLoopback != 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		var v4 string
		routeHere := false
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				if n.IP.String() == route {
					routeHere = true
				}
				if n.IP.To4() != nil && v4 == "" {
					v4 = n.IP.String()
				}
			}
		}
		if v4 == "" || !rdmamap.IsRDmaDeviceForNetdevice(ifc.Name) {
			continue
		}
		if routeHere {
			return ""
		}
		if found == "" {
			found = v4
		}
	}
	return found
}
