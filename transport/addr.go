package transport

import (
	"net"
	"os"
	"strconv"

	"github.com/rmago/rmago/internal/launch"
)

// pmiAddr picks the IP address a rank started by a PMI launcher listens on
// (docs/launch.md, "Listen address"). The first rule that gives an address
// wins:
//
//  1. RMAGO_ADDR;
//  2. 127.0.0.1 when the launcher says every rank is on this node
//     (Hydra's MPI_LOCALNRANKS equal to the size, Slurm's
//     SLURM_STEP_NUM_NODES=1);
//  3. Hydra's hint MPIR_CVAR_CH3_INTERFACE_HOSTNAME, if it is (or resolves
//     to) an address of this host;
//  4. the source address of the route to rank 0's address (other ranks) or
//     to srun's host SLURM_LAUNCH_NODE_IPADDR (rank 0), if not loopback;
//  5. an address of this host that its name (SLURMD_NODENAME, else the
//     host name) resolves to, if not loopback;
//  6. the first non-loopback IPv4 address of an interface that is up;
//  7. 127.0.0.1.
//
// Whatever the rule, a job whose ranks span machines and which has a rank
// on a loopback address fails (checked once the addresses are exchanged).
func pmiAddr(getenv func(string) string, rank, size int, root string) string {
	if v := getenv(launch.EnvAddr); v != "" {
		return v
	}
	if n, err := strconv.Atoi(getenv("MPI_LOCALNRANKS")); err == nil && n == size {
		return launch.DefaultAddr
	}
	if getenv("SLURM_STEP_NUM_NODES") == "1" {
		return launch.DefaultAddr
	}
	local := localIPs()
	if h := getenv("MPIR_CVAR_CH3_INTERFACE_HOSTNAME"); h != "" {
		if ip := resolveLocal(h, local); ip != "" {
			return ip
		}
	}
	toward := root
	if rank == 0 {
		toward = getenv("SLURM_LAUNCH_NODE_IPADDR")
	}
	if ip := routeTo(toward); ip != nil && !ip.IsLoopback() {
		return ip.String()
	}
	host := getenv("SLURMD_NODENAME")
	if host == "" {
		host, _ = os.Hostname()
	}
	if ip := resolveLocal(host, local); ip != "" && !net.ParseIP(ip).IsLoopback() {
		return ip
	}
	for _, ip := range local {
		if ip.To4() != nil && !ip.IsLoopback() {
			return ip.String()
		}
	}
	return launch.DefaultAddr
}

// localIPs lists the addresses of this host's interfaces that are up,
// loopback included.
func localIPs() []net.IP {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	var ips []net.IP
	for _, ifc := range ifs {
		if ifc.Flags&net.FlagUp == 0 {
			continue
		}
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && !ipn.IP.IsLinkLocalUnicast() {
				ips = append(ips, ipn.IP)
			}
		}
	}
	return ips
}

// resolveLocal returns the first address of name (an IP or a host name)
// that is one of this host's, or "".
func resolveLocal(name string, local []net.IP) string {
	var cands []net.IP
	if ip := net.ParseIP(name); ip != nil {
		cands = []net.IP{ip}
	} else {
		addrs, _ := net.LookupIP(name)
		cands = addrs
	}
	for _, c := range cands {
		for _, l := range local {
			if c.Equal(l) {
				return c.String()
			}
		}
	}
	return ""
}

// routeTo returns the source address the kernel would use to reach host
// (an IP), found by connecting a UDP socket, which sends nothing.
func routeTo(host string) net.IP {
	ip := net.ParseIP(host)
	if ip == nil {
		return nil
	}
	c, err := net.DialUDP("udp", nil, &net.UDPAddr{IP: ip, Port: 9})
	if err != nil {
		return nil
	}
	defer c.Close()
	return c.LocalAddr().(*net.UDPAddr).IP
}
