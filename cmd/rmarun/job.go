//go:build unix

package main

import (
	"encoding/json"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/rmago/rmago/internal/config"
	"github.com/rmago/rmago/internal/launch"
)

// A job is a set of ranks started from one command line, on rmarun's host
// and on remote hosts.
type job struct {
	opt    *options
	size   int
	secret string
	jobID  string
	events chan event
	outMu  sync.Mutex // serialises rmarun's writes to its standard output and error

	localRanks []int  // ranks on rmarun's host
	localAddr  string // the address they listen on
	local      *group // nil until started, or if there are none
	remotes    []*remote
	rank0      *remote  // the remote host of rank 0, or nil if it is local
	target     string   // address of rank 0's host, for remote hosts to route to
	rendezvous string   // host:port of rank 0's rendezvous, once known
	rdvFile    *os.File // rank 0's listener on it when rank 0 runs here (launch.EnvRendezvousFD)
	hostOf     []string
}

// newJob places the ranks on the hosts and prepares what they share: the
// secret, the job id, and where rank 0's rendezvous will be.
func newJob(o *options) (*job, error) {
	j := &job{opt: o, size: o.n, hostOf: make([]string, o.n)}
	if err := j.checkSettings(); err != nil {
		return nil, usageError{err.Error()}
	}
	var err error
	if j.secret, err = launch.NewSecret(); err != nil {
		return nil, fmt.Errorf("generating the job secret: %v", err)
	}
	if j.jobID, err = launch.NewJobID(); err != nil {
		return nil, fmt.Errorf("generating the job id: %v", err)
	}
	localAddr := o.addr
	if o.hosts == nil {
		for r := range o.n {
			j.localRanks = append(j.localRanks, r)
		}
	} else {
		placed, err := mapRanks(o.hosts, o.n, o.oversubscribe)
		if err != nil {
			return nil, usageError{err.Error()}
		}
		for i, h := range o.hosts {
			ranks := placed[i]
			if len(ranks) == 0 {
				continue
			}
			for _, r := range ranks {
				j.hostOf[r] = h.name
			}
			if isLocal(h.name) {
				j.localRanks = append(j.localRanks, ranks...)
				if localAddr == "" {
					localAddr = h.addr
				}
				continue
			}
			rm := &remote{index: len(j.remotes), name: h.name, ranks: ranks, addr: h.addr}
			if ranks[0] == 0 {
				j.rank0 = rm
			}
			j.remotes = append(j.remotes, rm)
		}
		slices.Sort(j.localRanks)
		if len(j.localRanks) > maxRanksPerHost {
			return nil, usageError{fmt.Sprintf("%d ranks on this host: at most %d ranks may run on one host", len(j.localRanks), maxRanksPerHost)}
		}
	}

	if len(j.remotes) == 0 { // a single-host job listens on loopback unless told otherwise
		switch {
		case localAddr != "":
		case o.iface != "":
			if localAddr, err = ifaceAddr(o.iface); err != nil {
				return nil, err
			}
		default:
			localAddr = launch.DefaultAddr
		}
		j.localAddr = localAddr
		return j, j.localRendezvous()
	}

	// A multi-host job: every host routes to rank 0's host.
	if j.rank0 != nil {
		if j.target = j.rank0.addr; j.target == "" {
			ip, err := resolveHost(j.rank0.name)
			if err != nil {
				return nil, fmt.Errorf("host %s (rank 0): %v; give its address with addr= in a hostfile", j.rank0.name, err)
			}
			j.target = ip.String()
		}
	}
	if len(j.localRanks) > 0 {
		to := j.target
		if j.rank0 == nil { // rank 0 is here: route towards the first remote host
			first := j.remotes[0]
			if to = first.addr; to == "" {
				ip, err := resolveHost(first.name)
				if err != nil {
					return nil, fmt.Errorf("host %s: %v; give its address with addr= in a hostfile", first.name, err)
				}
				to = ip.String()
			}
		}
		c := addrChoice{Addr: localAddr, Iface: o.iface, Target: to, Provider: j.provider()}
		if j.localAddr, err = c.pick(); err != nil {
			return nil, fmt.Errorf("choosing the address of this host's ranks: %v", err)
		}
		if ip := net.ParseIP(j.localAddr); ip.IsLoopback() && !net.ParseIP(to).IsLoopback() {
			return nil, fmt.Errorf("the ranks on this host would listen on %s, which the other hosts cannot reach", j.localAddr)
		}
		if j.rank0 == nil {
			j.target = j.localAddr
			return j, j.localRendezvous()
		}
	}
	return j, nil
}

// localRendezvous places rank 0's rendezvous on this host.
func (j *job) localRendezvous() error {
	f, port, err := rendezvousListener(j.localAddr)
	if err != nil {
		return fmt.Errorf("opening a rendezvous port on %s: %v", j.localAddr, err)
	}
	j.rdvFile = f
	j.rendezvous = net.JoinHostPort(j.localAddr, strconv.Itoa(port))
	return nil
}

// rendezvousListener listens on a free port of addr for rank 0, which
// inherits the listener (launch.EnvRendezvousFD): no other process can
// take the port between this choice and rank 0's start. It returns the
// listener as a file to hand to rank 0 (closed here once rank 0 has it).
func rendezvousListener(addr string) (*os.File, int, error) {
	ln, port, err := launch.ListenFree(addr)
	if err != nil {
		return nil, 0, err
	}
	defer ln.Close() // the file is a duplicate
	f, err := ln.File()
	if err != nil {
		return nil, 0, err
	}
	return f, port, nil
}

// provider is the provider the ranks will use, "" if unset.
func (j *job) provider() string {
	if j.opt.providerSet {
		return j.opt.provider
	}
	return os.Getenv(launch.EnvProvider)
}

// sharedEnv is what rmarun adds for every rank besides the contract of
// launch.Env: the job id, the provider, and the -x variables, which come
// last and so win.
func (j *job) sharedEnv() []string {
	env := []string{launch.EnvJobID + "=" + j.jobID}
	if j.opt.providerSet {
		env = append(env, launch.EnvProvider+"="+j.opt.provider)
	}
	return append(env, j.opt.env...)
}

// checkSettings checks the RMAGO_* settings the ranks will see (rmarun's
// environment, then -provider and -x), so that a bad value fails once,
// here, rather than in every rank's Init.
func (j *job) checkSettings() error {
	set := map[string]string{}
	for _, kv := range j.sharedEnv() {
		k, v, _ := strings.Cut(kv, "=")
		set[k] = v
	}
	_, err := config.Load(func(k string) string {
		if v, ok := set[k]; ok {
			return v
		}
		return os.Getenv(k)
	})
	return err
}

// contractNames are the variables each host sets for itself.
var contractNames = []string{launch.EnvRank, launch.EnvSize, launch.EnvRendezvous, launch.EnvSecret, launch.EnvAddr, launch.EnvNotifyFD, launch.EnvJobID}

// remoteEnv is what remote ranks get from rmarun's environment: its RMAGO_*
// settings (RMAGO_TIMEOUT, RMAGO_SOFT_SPIN, ...), then sharedEnv. Remote
// ranks otherwise have the environment of the remote login.
func (j *job) remoteEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "RMAGO_") && !slices.Contains(contractNames, name) {
			env = append(env, kv)
		}
	}
	return append(env, j.sharedEnv()...)
}

// startRemotes starts the launcher for every remote host.
func (j *job) startRemotes() error {
	agent := j.opt.agentPath
	if agent == "" {
		exe, err := os.Executable()
		if err != nil {
			return fmt.Errorf("finding rmarun's path for the remote hosts: %v (use -remote-rmarun)", err)
		}
		agent = exe
	}
	for _, r := range j.remotes {
		setup := setupMsg{
			Host:     r.name,
			Choice:   addrChoice{Addr: r.addr, Iface: j.opt.iface, Target: j.target, Provider: j.provider()},
			NeedPort: r == j.rank0,
		}
		if err := r.start(j.opt.launcher, agent, setup, j); err != nil {
			r.ended = true
			return fmt.Errorf("host %s: starting %s: %v", r.name, j.opt.launcher[0], err)
		}
	}
	return nil
}

// startRanks starts every rank, once every remote agent has said hello.
func (j *job) startRanks() {
	cwd, _ := os.Getwd()
	for _, r := range j.remotes {
		msg := startMsg{
			Ranks: r.ranks, Size: j.size, Argv: j.opt.argv, Cwd: cwd,
			Env: j.remoteEnv(), Rendezvous: j.rendezvous, Secret: j.secret, Addr: r.addr,
			BindTo: j.opt.bindTo, Oversubscribe: j.opt.oversubscribe,
		}
		b, _ := json.Marshal(msg)
		r.send(string(b) + "\n")
	}
	if len(j.localRanks) == 0 {
		return
	}
	j.local = &group{
		argv: j.opt.argv,
		env:  slices.Concat(os.Environ(), j.sharedEnv()),
		rankEnv: func(rank int) []string {
			return launch.Env(rank, j.size, j.rendezvous, j.secret, j.localAddr)
		},
		output: func(rank int) (*lineWriter, *lineWriter) {
			var prefix []byte
			if !j.opt.quiet {
				prefix = rankPrefix(rank)
			}
			return &lineWriter{w: os.Stdout, mu: &j.outMu, prefix: prefix},
				&lineWriter{w: os.Stderr, mu: &j.outMu, prefix: prefix}
		},
		events:        j.events,
		rdvFile:       j.rdvFile,
		bindTo:        j.opt.bindTo,
		oversubscribe: j.opt.oversubscribe,
	}
	go j.local.start(j.localRanks)
}

// say writes an rmarun message to standard error.
func (j *job) say(format string, args ...any) {
	j.outMu.Lock()
	defer j.outMu.Unlock()
	fmt.Fprintf(os.Stderr, "rmarun: "+format+"\n", args...)
}
