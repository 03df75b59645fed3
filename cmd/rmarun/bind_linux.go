package main

import (
	"fmt"
	"math/bits"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// cpuSet is a set of CPUs of this host.
type cpuSet = unix.CPUSet

// A binding is where a host's ranks run: the CPU set of each (by its index
// among the host's ranks) and how many ranks share it. A nil binding
// leaves them unbound.
type binding struct {
	sets    []cpuSet
	sharing []int
}

// bindRanks deals the units of policy among the CPUs rmarun may run on (its
// own affinity, which a batch system's cpuset restricts) to n ranks.
func bindRanks(policy string, n int, oversubscribe bool) (*binding, error) {
	if policy == "" || policy == bindNone {
		return nil, nil
	}
	var allowed unix.CPUSet
	if err := unix.SchedGetaffinity(0, &allowed); err != nil {
		return nil, fmt.Errorf("-bind-to %s: reading this process's CPUs: %w", policy, err)
	}
	units := cpuUnits(allowed, policy)
	unit, sharing, err := dealUnits(len(units), n, policy, oversubscribe)
	if err != nil {
		return nil, err
	}
	b := &binding{sets: make([]unix.CPUSet, n), sharing: sharing}
	for i, u := range unit {
		b.sets[i] = units[u]
	}
	return b, nil
}

// cpuUnits splits allowed into the units of policy, ordered by their lowest
// CPU: one set per CPU for hwthread, the CPUs of each core for core (from
// sysfs; a CPU whose core is unknown is a core of its own).
func cpuUnits(allowed unix.CPUSet, policy string) []unix.CPUSet {
	var units []unix.CPUSet
	seen := map[string]int{} // a core's CPU list -> its unit
	for cpu := range maxCPUs {
		if !allowed.IsSet(cpu) {
			continue
		}
		key := strconv.Itoa(cpu)
		if policy == bindCore {
			if s := coreSiblings(cpu); s != "" {
				key = s
			}
		}
		u, ok := seen[key]
		if !ok {
			u = len(units)
			seen[key] = u
			units = append(units, unix.CPUSet{})
		}
		units[u].Set(cpu)
	}
	return units
}

// maxCPUs is the number of CPUs a unix.CPUSet holds.
const maxCPUs = len(unix.CPUSet{}) * bits.UintSize

// coreSiblings returns the list of the CPUs of cpu's core as sysfs gives
// it ("0,64" or "0-1"), or "" if sysfs does not say.
func coreSiblings(cpu int) string {
	dir := "/sys/devices/system/cpu/cpu" + strconv.Itoa(cpu) + "/topology/"
	for _, name := range []string{"core_cpus_list", "thread_siblings_list"} {
		if b, err := os.ReadFile(dir + name); err == nil {
			return strings.TrimSpace(string(b))
		}
	}
	return ""
}

// startOn calls start (which forks a process) on an OS thread bound to set,
// so that the process inherits the binding before it runs anything (the Go
// runtime of a rank sizes itself by it), then unbinds the thread. A nil set
// calls start as it is.
//
// The thread must outlive the call: the ranks' parent-death signal follows
// the thread that forked them. So it is given back to the runtime with its
// old affinity, and if that cannot be restored it is kept, idle, for good.
func startOn(set *cpuSet, start func() error) error {
	if set == nil {
		return start()
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		var old unix.CPUSet
		if err := unix.SchedGetaffinity(0, &old); err != nil {
			runtime.UnlockOSThread()
			done <- err
			return
		}
		if err := unix.SchedSetaffinity(0, set); err != nil {
			runtime.UnlockOSThread()
			done <- fmt.Errorf("binding to CPUs %s: %w", cpuList(*set), err)
			return
		}
		done <- start()
		if unix.SchedSetaffinity(0, &old) != nil {
			select {} // keep the bound thread out of the runtime's pool
		}
		runtime.UnlockOSThread()
	}()
	return <-done
}

// cpuList formats set as a list of CPU numbers ("0,1").
func cpuList(set unix.CPUSet) string {
	var cpus []string
	for cpu := range maxCPUs {
		if set.IsSet(cpu) {
			cpus = append(cpus, strconv.Itoa(cpu))
		}
	}
	return strings.Join(cpus, ",")
}
