//go:build unix

// Command rmarun launches an rmago job: N processes of one program, on this
// host or on several hosts reached through ssh.
//
// Usage:
//
//	rmarun [-n|-np N] [-H h1[:slots],h2... | --hostfile F] [-x VAR[=value]]...
//	       [--launcher ssh|rsh | --launcher-exec CMD] [--tag-output | -quiet-prefix]
//	       [--oversubscribe] [-bind-to none|core|hwthread]
//	       [-provider soft|ibv|shm|auto] [-addr IP] [-iface NAME]
//	       [-timeout D] [-startup-timeout D] [-remote-rmarun PATH] program [args...]
//
// Flags may be written with one dash or two (-np, --np).
//
//	-n, -np N           number of ranks (default 1, or the hosts' slots)
//	-H, -host, -hosts L hosts, comma-separated, each "host" (one slot) or
//	                    "host:slots"; a host named twice adds up its slots
//	-hostfile, -machinefile F
//	                    a file of hosts, one a line: "host [slots=N]
//	                    [max_slots=N] [addr=IP]" or "host:N"; '#' comments
//	-x VAR[=value]      set VAR for every rank, to value or to rmarun's own
//	                    value (repeatable)
//	-launcher ssh|rsh   how to reach remote hosts (default ssh: "ssh -x")
//	-launcher-exec CMD  run CMD HOST SHELL-COMMAND instead, like ssh (CMD is
//	                    split at spaces)
//	-tag-output         prefix each output line with "[rank] " (the default)
//	-quiet-prefix       do not prefix output lines
//	-oversubscribe      allow more ranks than the hosts' slots (and, with
//	                    -bind-to, than their cores: the ranks then share them)
//	-bind-to U          bind the ranks of each host to one unit each of the
//	                    CPUs rmarun may use there, dealt in rank order: none
//	                    (the default), core (all hardware threads of a core)
//	                    or hwthread. A bound rank's Go runtime sizes itself
//	                    by its unit (GOMAXPROCS 1 on a core of one thread):
//	                    steady loops on shm gain a little, a rank waking
//	                    from a sleep waits longer, and soft's responder
//	                    waits for the rank's own work (docs/launch.md,
//	                    binding)
//	-provider P         set RMAGO_PROVIDER to P (soft, ibv, shm or auto)
//	-addr IP            the address ranks on this host listen on
//	                    (default 127.0.0.1 for a job on this host only)
//	-iface NAME         every host's ranks listen on that interface's address
//	-timeout D          stop the job after the Go duration D (0: no limit)
//	-startup-timeout D  once a rank has entered rma.Init, every rank must
//	                    join within D (default 30s; 0: no limit)
//	-remote-rmarun PATH rmarun's path on the remote hosts (default: the path
//	                    of this rmarun)
//
// # Hosts
//
// Without -H or -hostfile every rank runs here. Otherwise ranks fill the
// hosts' slots in order (ranks 0..s1-1 on the first host, and so on); more
// ranks than slots are refused unless -oversubscribe, which deals the extra
// ranks one per host in turn. A host that names this machine (localhost,
// its host name, one of its addresses) runs its ranks directly; every
// other host is reached by running, as ssh would,
//
//	LAUNCHER HOST 'exec /path/to/rmarun -agent'
//
// The agent reads the job on its standard input (the secret is never on a
// command line), starts that host's ranks, relays their output and reports
// how each ends. When its input closes, because rmarun or the ssh
// connection is gone, it stops its ranks; so does SIGHUP. A stand-in for ssh
// must pass standard input and output through and run the command with
// sh -c, like ci/cluster's network-namespace launcher.
//
// In a job on several hosts no rank listens on loopback: each host's ranks
// listen on, in this order, the host's addr= in the hostfile (or -addr for
// this host), the address of -iface, the address of an RDMA network device
// (found with rdmamap, unless the provider is soft), or the address of the
// interface that routes to rank 0's host. Rank 0's host is reached at the
// address its name resolves to here (or its addr=), and rank 0 listens for
// the rendezvous there.
//
// # Ranks
//
// Each rank runs with the environment of rmarun (remote ranks: of the
// remote login, plus rmarun's RMAGO_* settings), the -x variables and:
//
//	RMAGO_RANK        rank of the process, 0..N-1
//	RMAGO_SIZE        N
//	RMAGO_RENDEZVOUS  host:port on which rank 0 listens for the bootstrap rendezvous
//	RMAGO_SECRET      per-job authentication key: 32 random bytes as 64 hex characters
//	RMAGO_ADDR        the address the rank listens on
//	RMAGO_PROVIDER    the -provider value (only if the flag is given)
//	RMAGO_JOBID       short random hex identifier of the job
//	RMAGO_NOTIFY_FD   1000: a pipe on which rma.Init reports its progress and the
//	                  transport its lost peers; its end marks the rank's death
//
// and, on each host, GOMAXPROCS = min(cores, cores/ranks + 1) and with more
// ranks than cores RMAGO_SOFT_SPIN=0, unless set (see internal/launch). The
// names are defined in package internal/launch. Standard input is
// /dev/null. Each line a rank writes is copied to rmarun's standard output
// or error, prefixed with "[rank] "; lines of different ranks never mix.
//
// # Failures
//
// Exit status: 0 if every rank exits 0. Otherwise rmarun stops every rank
// on every host (SIGTERM, then SIGKILL after 2 seconds) and reports the
// failure that caused the others: the first in the kernel's order of the
// ranks' deaths, leaving out ranks that reported losing a peer that failed
// too (docs/launch.md). A failure is a rank that exited non-zero or
// was killed, could not be started, or, once any rank has entered
// rma.Init, ended without joining the job; or a remote host whose agent
// could not start or was lost. It exits with that rank's
// status if it is in 1..125, or 1 otherwise. A rank that does not join
// within -startup-timeout stops the job (status 1). SIGINT and SIGTERM
// received by rmarun are forwarded to the ranks (a second one kills them at
// once) and rmarun exits with 128 plus the signal number. When -timeout
// expires the job is stopped and rmarun exits 124. Usage errors exit 2.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "-agent" || os.Args[1] == "--agent") {
		os.Exit(runAgent())
	}
	os.Exit(run(os.Args[1:], os.Stderr))
}

// run parses the command line, runs the job and returns the exit status.
func run(args []string, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	var j *job
	if err == nil {
		j, err = newJob(o)
	}
	var ue usageError
	switch {
	case errors.As(err, &ue):
		if ue.msg != "" {
			fmt.Fprintln(stderr, "rmarun:", ue.msg)
		}
		fmt.Fprintln(stderr, usageLine)
		return 2
	case err != nil:
		fmt.Fprintln(stderr, "rmarun:", err)
		return 1
	}
	return j.run()
}
