//go:build unix

package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
)

// Limits on the size of a job: beyond them rmarun refuses to start it. A
// rank is a process with a connection to every other rank, so a thousand
// ranks on one host already hold a million sockets.
const (
	maxRanks        = 1024 // in a job
	maxRanksPerHost = 256  // on one host
)

// A hostSpec is a host named by -H or --hostfile.
type hostSpec struct {
	name  string
	slots int    // ranks it takes before it is oversubscribed
	addr  string // IP its ranks listen on (hostfile addr=); "" to pick one
}

// parseHostList parses -H's "h1[:slots],h2[:slots],...". A host without a
// slot count has one slot; a host named twice adds up its slots, as in
// Open MPI.
func parseHostList(s string) ([]hostSpec, error) {
	var hosts []hostSpec
	for _, item := range strings.Split(s, ",") {
		h, err := parseHostSlots(strings.TrimSpace(item))
		if err != nil {
			return nil, fmt.Errorf("-H %q: %v", s, err)
		}
		hosts = append(hosts, h)
	}
	return mergeHosts(hosts), nil
}

// parseHostSlots parses "host" or "host:slots".
func parseHostSlots(s string) (hostSpec, error) {
	name, slots, hasSlots := strings.Cut(s, ":")
	h := hostSpec{name: name, slots: 1}
	if hasSlots {
		n, err := strconv.Atoi(slots)
		if err != nil || n < 1 {
			return h, fmt.Errorf("bad slot count %q for host %q", slots, name)
		}
		h.slots = n
	}
	return h, checkHostName(name)
}

// checkHostName refuses names that a launcher such as ssh would take for
// something else.
func checkHostName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty host name")
	case strings.HasPrefix(name, "-"):
		return fmt.Errorf("host name %q starts with '-'", name)
	case strings.ContainsAny(name, " \t'\"\\$`;&|<>()*?[]{}!"):
		return fmt.Errorf("host name %q has a character hosts do not have", name)
	}
	return nil
}

// parseHostfile reads a host file: one host a line, in Open MPI's form
// "host [slots=N] [max_slots=N]" or Hydra's "host[:N]", plus rmarun's
// "addr=IP", the address that host's ranks listen on. '#' starts a comment.
func parseHostfile(path string) ([]hostSpec, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var hosts []hostSpec
	sc := bufio.NewScanner(f)
	for line := 1; sc.Scan(); line++ {
		text, _, _ := strings.Cut(sc.Text(), "#")
		fields := strings.Fields(text)
		if len(fields) == 0 {
			continue
		}
		bad := func(format string, args ...any) error {
			return fmt.Errorf("%s:%d: %s", path, line, fmt.Sprintf(format, args...))
		}
		h, err := parseHostSlots(fields[0])
		if err != nil {
			return nil, bad("%v", err)
		}
		for _, kv := range fields[1:] {
			k, v, ok := strings.Cut(kv, "=")
			n, nerr := strconv.Atoi(v)
			switch {
			case !ok:
				return nil, bad("%q is not key=value", kv)
			case k == "slots" || k == "max_slots" || k == "max-slots":
				if nerr != nil || n < 1 {
					return nil, bad("bad %s %q", k, v)
				}
				if k == "slots" {
					h.slots = n
				}
			case k == "addr":
				if net.ParseIP(v) == nil {
					return nil, bad("addr=%q is not an IP address", v)
				}
				h.addr = v
			default:
				return nil, bad("unknown setting %q (slots, max_slots, addr)", k)
			}
		}
		hosts = append(hosts, h)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(hosts) == 0 {
		return nil, fmt.Errorf("%s: no hosts", path)
	}
	return mergeHosts(hosts), nil
}

// mergeHosts merges the entries of a host named more than once, in the
// order of first appearance.
func mergeHosts(hosts []hostSpec) []hostSpec {
	var out []hostSpec
	index := make(map[string]int)
	for _, h := range hosts {
		if i, ok := index[h.name]; ok {
			out[i].slots += h.slots
			if h.addr != "" {
				out[i].addr = h.addr
			}
			continue
		}
		index[h.name] = len(out)
		out = append(out, h)
	}
	return out
}

// totalSlots is the number of slots of hosts.
func totalSlots(hosts []hostSpec) int {
	n := 0
	for _, h := range hosts {
		n += h.slots
	}
	return n
}

// mapRanks places n ranks on hosts by slot: ranks 0.. fill the first
// host's slots, then the next host's, and so on. More ranks than slots are
// refused unless oversubscribe is set; they are then dealt one per host in
// turn. The result has the ranks of each host, in host order.
func mapRanks(hosts []hostSpec, n int, oversubscribe bool) ([][]int, error) {
	if total := totalSlots(hosts); n > total && !oversubscribe {
		return nil, fmt.Errorf("%d ranks do not fit in the %d slots of the hosts; add slots (host:N, slots=N) or --oversubscribe", n, total)
	}
	out := make([][]int, len(hosts))
	rank := 0
	for i, h := range hosts {
		for s := 0; s < h.slots && rank < n; s++ {
			out[i] = append(out[i], rank)
			rank++
		}
	}
	for i := 0; rank < n; i = (i + 1) % len(hosts) {
		out[i] = append(out[i], rank)
		rank++
	}
	for i, ranks := range out {
		if len(ranks) > maxRanksPerHost {
			return nil, fmt.Errorf("%d ranks on host %s: at most %d ranks may run on one host", len(ranks), hosts[i].name, maxRanksPerHost)
		}
	}
	return out, nil
}

// isLocal reports whether host names the machine rmarun runs on: its ranks
// are then started directly, not through the launcher.
func isLocal(host string) bool {
	if host == "localhost" || host == "localhost.localdomain" {
		return true
	}
	if ip := net.ParseIP(host); ip != nil {
		if ip.Equal(net.IPv4(127, 0, 0, 1)) || ip.Equal(net.IPv6loopback) {
			return true
		}
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return true
			}
		}
		return false
	}
	name, err := os.Hostname()
	if err != nil {
		return false
	}
	short, _, _ := strings.Cut(name, ".")
	return strings.EqualFold(host, name) || strings.EqualFold(host, short)
}
