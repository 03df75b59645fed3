//go:build unix

package main

import (
	"fmt"
	"net"
)

// resolveHost returns the address rmarun reaches host at, an IPv4 address
// if it has one.
func resolveHost(host string) (net.IP, error) {
	if ip := net.ParseIP(host); ip != nil {
		return ip, nil
	}
	ips, err := net.LookupIP(host)
	if err != nil {
		return nil, err
	}
	for _, ip := range ips {
		if ip4 := ip.To4(); ip4 != nil {
			return ip4, nil
		}
	}
	if len(ips) == 0 {
		return nil, fmt.Errorf("no address for %s", host)
	}
	return ips[0], nil
}

// An addrChoice says how a host of a multi-host job picks the address its
// ranks listen on, in this order: an explicit address, the IPv4 address of
// a named interface, an RDMA network device's address (unless the provider
// is soft), or the address of the interface that routes to target, the
// host of rank 0.
type addrChoice struct {
	Addr     string // explicit (hostfile addr=, or -addr for rmarun's host)
	Iface    string // -iface
	Target   string // IP of rank 0's host
	Provider string // the job's provider, "" if not set
}

// pick returns the chosen address.
func (c addrChoice) pick() (string, error) {
	if c.Addr != "" {
		return c.Addr, nil
	}
	if c.Iface != "" {
		return ifaceAddr(c.Iface)
	}
	route, err := routeSource(c.Target)
	if err != nil {
		return "", err
	}
	if c.Provider != "soft" {
		if a := rdmaAddr(route); a != "" {
			return a, nil
		}
	}
	return route, nil
}

// ifaceAddr returns the first IPv4 address of the interface name, or its
// first address if it has no IPv4 one.
func ifaceAddr(name string) (string, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return "", fmt.Errorf("interface %s: %v", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return "", fmt.Errorf("interface %s: %v", name, err)
	}
	var first string
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.IsLinkLocalUnicast() {
			continue
		}
		if n.IP.To4() != nil {
			return n.IP.String(), nil
		}
		if first == "" {
			first = n.IP.String()
		}
	}
	if first == "" {
		return "", fmt.Errorf("interface %s has no usable address", name)
	}
	return first, nil
}

// routeSource returns the local address the kernel would use to reach
// target: a UDP "connection" chooses it without sending anything.
func routeSource(target string) (string, error) {
	if target == "" {
		return "", fmt.Errorf("no address of rank 0's host to route to")
	}
	conn, err := net.Dial("udp", net.JoinHostPort(target, "9"))
	if err != nil {
		return "", fmt.Errorf("no route to rank 0's host %s: %v", target, err)
	}
	defer conn.Close()
	ip := conn.LocalAddr().(*net.UDPAddr).IP
	if ip.IsLoopback() && !net.ParseIP(target).IsLoopback() {
		return "", fmt.Errorf("the route to rank 0's host %s is through loopback", target)
	}
	return ip.String(), nil
}
