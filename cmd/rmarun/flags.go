//go:build unix

package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/internal/launch"
)

// options are rmarun's command line.
type options struct {
	n             int
	hosts         []hostSpec // from -H or --hostfile; nil for a job on this host only
	env           []string   // -x, as NAME=value
	launcher      []string   // the command that runs a shell command on a host
	agentPath     string     // rmarun's path on the remote hosts
	quiet         bool
	oversubscribe bool
	bindTo        string // bindNone, bindCore or bindHWThread
	provider      string
	providerSet   bool
	addr          string // -addr, "" if not given
	iface         string
	timeout       time.Duration
	startup       time.Duration
	argv          []string
}

// defaultStartup bounds the start-up: from the moment the first rank enters
// rma.Init, every rank must have joined the job within it. Remote hosts'
// agents must also say hello within it.
const defaultStartup = 30 * time.Second

const usageLine = `usage: rmarun [-n|-np N] [-H h1[:slots],h2... | --hostfile F] [-x VAR[=value]]...
              [--launcher ssh|rsh | --launcher-exec CMD] [--tag-output | -quiet-prefix]
              [--oversubscribe] [-bind-to none|core|hwthread]
              [-provider soft|ibv|shm|auto] [-addr IP] [-iface NAME]
              [-timeout D] [-startup-timeout D] [-remote-rmarun PATH] program [args...]`

// parseFlags parses rmarun's command line. It returns a usage problem as
// an error (exit status 2), or flag.ErrHelp.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("rmarun", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.n, "n", 0, "number of ranks to start (default 1, or the hosts' slots)")
	fs.IntVar(&o.n, "np", 0, "same as -n")
	var hostList []string
	hostFlag := func(s string) error { hostList = append(hostList, s); return nil }
	fs.Func("H", "comma-separated `hosts`, each host or host:slots", hostFlag)
	fs.Func("host", "same as -H", hostFlag)
	fs.Func("hosts", "same as -H", hostFlag)
	var hostfile string
	fs.StringVar(&hostfile, "hostfile", "", "`file` of hosts: host [slots=N] [addr=IP], or host:N, one a line")
	fs.StringVar(&hostfile, "machinefile", "", "same as -hostfile")
	var xvars []string
	fs.Func("x", "pass environment `VAR[=value]` to the ranks (repeatable)", func(s string) error { xvars = append(xvars, s); return nil })
	launcher := fs.String("launcher", "ssh", "how to reach remote hosts: ssh or rsh")
	launcherExec := fs.String("launcher-exec", "", "`command` run as CMD HOST SHELL-COMMAND to reach a remote host, instead of ssh")
	fs.StringVar(&o.agentPath, "remote-rmarun", "", "`path` of rmarun on remote hosts (default: this rmarun's path)")
	tag := fs.Bool("tag-output", false, "prefix every output line with [rank] (the default)")
	fs.BoolVar(&o.quiet, "quiet-prefix", false, "do not prefix output lines with the rank")
	fs.BoolVar(&o.oversubscribe, "oversubscribe", false, "allow more ranks than the hosts' slots (and than their cores, with -bind-to)")
	fs.StringVar(&o.bindTo, "bind-to", bindNone, "bind each rank of a host to one `unit` of the CPUs rmarun may use there: none, core (all hardware threads of one core) or hwthread")
	fs.StringVar(&o.provider, "provider", "", "fabric `provider` for the ranks: "+strings.Join(config.Providers, ", ")+" (default: inherit "+launch.EnvProvider+")")
	fs.StringVar(&o.addr, "addr", "", "`IP` address the ranks on this host listen on (default 127.0.0.1 for a single-host job)")
	fs.StringVar(&o.iface, "iface", "", "network `interface` whose address the ranks listen on, on every host")
	fs.DurationVar(&o.timeout, "timeout", 0, "kill the job after this `duration` (0: no limit)")
	fs.DurationVar(&o.startup, "startup-timeout", defaultStartup, "every rank must join within this `duration` of the first rank entering rma.Init (0: no limit)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), usageLine)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if err == flag.ErrHelp {
			return nil, err
		}
		return nil, usageError{""} // the flag package has said why
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	o.providerSet = set["provider"]
	o.argv = fs.Args()
	if *tag {
		o.quiet = false
	}

	bad := func(format string, args ...any) (*options, error) {
		return nil, usageError{fmt.Sprintf(format, args...)}
	}
	switch {
	case len(o.argv) == 0:
		return bad("no program given")
	case (set["n"] || set["np"]) && o.n < 1:
		return bad("-n must be at least 1")
	case o.n > maxRanks:
		return bad("-n %d: at most %d ranks may run in a job", o.n, maxRanks)
	case o.addr != "" && net.ParseIP(o.addr) == nil:
		return bad("-addr %q is not an IP address", o.addr)
	case o.timeout < 0:
		return bad("-timeout must not be negative")
	case o.startup < 0:
		return bad("-startup-timeout must not be negative")
	case o.providerSet && !slices.Contains(config.Providers, o.provider):
		return bad("-provider %q is not one of %s", o.provider, strings.Join(config.Providers, ", "))
	case !slices.Contains(bindPolicies, o.bindTo):
		return bad("-bind-to %q is not one of %s", o.bindTo, strings.Join(bindPolicies, ", "))
	case *launcher != "ssh" && *launcher != "rsh":
		return bad("--launcher %q is not ssh or rsh (use --launcher-exec for another command)", *launcher)
	case set["launcher-exec"] && len(strings.Fields(*launcherExec)) == 0:
		return bad("--launcher-exec needs a command")
	case len(hostList) > 0 && hostfile != "":
		return bad("give hosts with -H or with --hostfile, not both")
	}
	o.launcher = launcherArgv(*launcher, *launcherExec)

	for _, x := range xvars {
		name, value, hasValue := strings.Cut(x, "=")
		if name == "" || strings.ContainsAny(name, " \t\n") {
			return bad("-x %q: not VAR or VAR=value", x)
		}
		if !hasValue {
			v, ok := os.LookupEnv(name)
			if !ok {
				return bad("-x %s: %s is not set", name, name)
			}
			value = v
		}
		o.env = append(o.env, name+"="+value)
	}

	switch {
	case len(hostList) > 0:
		for _, s := range hostList {
			hosts, err := parseHostList(s)
			if err != nil {
				return bad("%v", err)
			}
			o.hosts = append(o.hosts, hosts...)
		}
		o.hosts = mergeHosts(o.hosts)
	case hostfile != "":
		hosts, err := parseHostfile(hostfile)
		if err != nil {
			return bad("--hostfile: %v", err)
		}
		o.hosts = hosts
	}
	if o.n == 0 {
		o.n = 1
		if o.hosts != nil {
			o.n = min(totalSlots(o.hosts), maxRanks)
		}
	}
	if o.hosts == nil && o.n > maxRanksPerHost {
		return bad("-n %d: at most %d ranks may run on one host", o.n, maxRanksPerHost)
	}
	return o, nil
}

// A usageError is a bad command line; rmarun prints it with the usage and
// exits 2.
type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }
