package config

import "strings"

// Kind says who sets a variable and who reads it.
type Kind int

const (
	// Setting: set by the user (or rmarun's flags), read by Load.
	Setting Kind = iota
	// Contract: set by rmarun for each rank, read by internal/launch and
	// transport's bootstrap; users set RMAGO_ADDR themselves at most.
	Contract
	// Test: read by tests and CI scripts only, never by the library.
	Test
)

func (k Kind) String() string {
	switch k {
	case Contract:
		return "launch contract"
	case Test:
		return "tests, CI"
	}
	return "setting"
}

// Var is one RMAGO_* variable: a row of docs/config.md.
type Var struct {
	Name     string // RMAGO_...; a name ending in * is a prefix
	Kind     Kind
	Meaning  string
	Accepted string // also quoted by the error for a bad value
	Default  string // when unset
	ReadBy   string // the package or program that reads it
}

// Vars lists every RMAGO_* variable the project reads, in the order of
// docs/config.md. A test scans the sources and fails on any RMAGO_ name
// missing here, and another checks docs/config.md against it.
var Vars = []Var{
	{EnvProvider, Setting, "verbs provider (rmarun -provider sets it)",
		"auto, soft, ibv or shm", "auto: shm for node-local peers; for the others ibv when an RDMA device is usable, else soft with a notice", "transport (Open)"},
	{EnvDevice, Setting, "the provider's device",
		"a device name (ibv_devices lists them; soft has only soft0)", "the provider's choice", "transport (Open), passed to the provider"},
	{EnvNetDev, Setting, "pick the RDMA device on this network interface (ibv), when RMAGO_DEVICE is unset",
		"an interface name such as eth2", "the first usable device", "transport (Open) via verbs.Config.NetDev"},
	{EnvTimeout, Setting, "bound on every blocking wait; past it a wait fails with transport.ErrTimeout",
		"a Go duration >= 0 such as 30s or 2m; 0: no bound", "2m", "transport (Open)"},
	{EnvConnect, Setting, "when pairs of ranks are connected",
		"lazy (on first use, where the provider can) or eager (all in Init)", "lazy", "transport (Open)"},
	{EnvFence, Setting, "how the first round of a fence runs among 3 to 7 ranks that reach one another over the network (the same on every rank: the ranks agree in Init, all winning over gather)",
		"auto, all (every rank notifies every other: one hop) or gather (through rank 0: 2(size-1) messages, two hops)", "auto: gather when some node of the job runs more ranks than cores, all otherwise; all whenever a rank reaches a peer through shm", "transport (Open), sync/fence"},
	{EnvSoftSpin, Setting, "how long a waiting soft rank polls after the last message before it sleeps",
		"a Go duration >= 0 such as 100us; 0: never poll", "100us; 0 on a node with more than two ranks a core (with more ranks than cores a polling rank yields its core to other processes between polls)", "transport (Open) via verbs.Config.Spin"},
	{EnvShmSpin, Setting, "how long the shm provider's completion wait polls before it sleeps on its futex",
		"a Go duration >= 0 such as 50us; 0: sleep at once", "1ms (on a node with more ranks than cores, yielding the core to other processes between polls)", "transport (Open) via verbs.Config.ShmSpin"},
	{EnvShmCMA, Setting, "whether the shm provider reaches node-local memory that is not shared (created windows) with cross-memory attach (process_vm_readv/writev), or through its owner's socket (as when the kernel refuses it)",
		"on or off", "on", "transport (Open) via verbs.Config.ShmNoCMA"},
	{EnvTCPCongestion, Setting, "the TCP congestion control of the soft provider's connections (bursts of up to megabytes between idle round trips, on a low-latency network)",
		"reno, system (the host's net.ipv4.tcp_congestion_control) or another algorithm the host offers (without privileges: net.ipv4.tcp_allowed_congestion_control)", "reno, where the host lets it be set; the host's default otherwise", "transport (Open) via verbs.Config.TCPCongestion"},
	{EnvIBVSpin, Setting, "polls of the ibv provider's CQ wait before it sleeps on the completion channel",
		"an integer >= 0; 0: sleep at once", "adaptive, 32 to 256", "transport (Open) via verbs.Config.SpinPolls"},
	{EnvPMI, Setting, "PMI wire under a PMI launcher (mpiexec, srun --mpi=pmi2)",
		"1 or 2", "1", "transport (BootstrapPMI)"},
	{EnvNode, Setting, "the rank's node identity: ranks with equal values share a node",
		"any string", "host name, boot id, network namespace and the launcher's node name", "transport (LocalNode)"},

	{"RMAGO_RANK", Contract, "rank of the process", "0 .. size-1", "unset: not started by rmarun", "internal/launch, transport (bootstrap)"},
	{"RMAGO_SIZE", Contract, "number of ranks in the job", "an integer >= 1", "unset: not started by rmarun", "internal/launch, transport (bootstrap)"},
	{"RMAGO_RENDEZVOUS", Contract, "host:port where rank 0 listens for the start-up rendezvous", "host:port", "set by rmarun", "transport (bootstrap)"},
	{"RMAGO_SECRET", Contract, "the job's authentication key; never logged", "64 hex characters (32 random bytes)", "set by rmarun; a job of one rank draws its own", "transport (bootstrap)"},
	{"RMAGO_ADDR", Contract, "IP address the rank's fabric listens on (users may set it under PMI)", "an IP address", "127.0.0.1, or the launcher's (docs/launch.md)", "transport (bootstrap, addr.go)"},
	{"RMAGO_JOBID", Contract, "short random identifier of the job, for logs", "8 hex characters", "set by rmarun", "the program, for its logs (set by cmd/rmarun)"},
	{"RMAGO_RENDEZVOUS_FD", Contract, "rank 0's rendezvous listener, opened by rmarun and inherited, so that no other process takes the port first", "a file descriptor >= 3", "unset: rank 0 listens on RMAGO_RENDEZVOUS itself", "internal/launch (rendezvousfd.go)"},
	{"RMAGO_BOUND", Contract, "set for a rank rmarun bound to CPUs (-bind-to): how many of the host's ranks share its CPUs, itself included", "an integer >= 1", "unset: not bound by rmarun (the rank shares cores when its node has more ranks than it has CPUs)", "internal/launch (CoresShared), transport (Open)"},
	{"RMAGO_NOTIFY_FD", Contract, "pipe on which a rank reports its start-up to rmarun", "a file descriptor >= 3", "unset: no reports", "internal/launch (notify.go)"},

	{"RMAGO_GID_INDEX", Test, "RoCE GID index the Soft-RoCE VM expects the ibv provider to pick", "an integer >= 0", "unset: not checked", "verbs/ibv tests, ci/softroce"},
	{"RMAGO_VM", Test, "set inside the Soft-RoCE VM", "1", "unset", "ci/softroce"},
	{"RMAGO_VM_IP", Test, "the Soft-RoCE VM's address", "an IP address", "192.0.2.1", "ci/softroce"},
	{"RMAGO_VM_*", Test, "the Soft-RoCE VM's build and boot options (DIR, KERNEL, MEM, SMP, OPTS)", "see ci/softroce/README.md", "see ci/softroce", "ci/softroce"},
	{"RMAGO_PERF_DEVICE", Test, "device of the VM's perftest runs", "a device name", "rxe0", "ci/softroce"},
	{"RMAGO_TEST_*", Test, "hand-offs between a test and the child processes it starts", "set by the test itself", "unset", "tests"},
}

// Lookup returns the Var that describes name (a prefix row for a prefixed
// name), and whether there is one.
func Lookup(name string) (Var, bool) {
	for _, v := range Vars {
		if v.Name == name {
			return v, true
		}
		if p, ok := strings.CutSuffix(v.Name, "*"); ok && strings.HasPrefix(name, p) && len(name) > len(p) {
			return v, true
		}
	}
	return Var{}, false
}

// Markdown renders Vars as the table of docs/config.md.
func Markdown() string {
	var b strings.Builder
	b.WriteString("| variable | kind | meaning | accepted values | default | read by |\n")
	b.WriteString("|---|---|---|---|---|---|\n")
	for _, v := range Vars {
		for _, c := range []string{"`" + v.Name + "`", v.Kind.String(), v.Meaning, v.Accepted, v.Default, v.ReadBy} {
			b.WriteString("| " + strings.ReplaceAll(c, "|", `\|`) + " ")
		}
		b.WriteString("|\n")
	}
	return b.String()
}
