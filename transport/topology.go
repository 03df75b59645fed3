package transport

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/rmago/rmago/internal/config"
)

// Topology says which ranks of a job share a node, so that node-local peers
// can be reached another way (shared memory). Nodes are numbered in the
// order of their lowest rank.
type Topology struct {
	rank  int
	node  []int   // node number of each rank
	peers [][]int // ranks of each node, ascending
}

// NewTopology builds the topology of a job from every rank's node identity.
func NewTopology(rank int, ids []string) Topology {
	t := Topology{rank: rank, node: make([]int, len(ids))}
	num := map[string]int{}
	for r, id := range ids {
		n, ok := num[id]
		if !ok {
			n = len(t.peers)
			num[id] = n
			t.peers = append(t.peers, nil)
		}
		t.node[r] = n
		t.peers[n] = append(t.peers[n], r)
	}
	return t
}

// Node is the node number of rank r, in [0, NumNodes()).
func (t Topology) Node(r int) int { return t.node[r] }

// NumNodes is the number of nodes the job runs on.
func (t Topology) NumNodes() int { return len(t.peers) }

// NodeRank is this rank's index among the ranks of its node.
func (t Topology) NodeRank() int {
	return slices.Index(t.peers[t.node[t.rank]], t.rank)
}

// NodeSize is the number of ranks on this rank's node, itself included.
func (t Topology) NodeSize() int { return len(t.peers[t.node[t.rank]]) }

// LocalPeers returns the ranks on this rank's node, itself included, in
// ascending order. The slice is the caller's.
func (t Topology) LocalPeers() []int { return slices.Clone(t.peers[t.node[t.rank]]) }

// SameNode reports whether rank r runs on this rank's node.
func (t Topology) SameNode(r int) bool { return t.node[r] == t.node[t.rank] }

// nodeLister is implemented by bootstraps that already know every rank's
// node identity.
type nodeLister interface {
	Nodes() []string
}

// TopologyOf returns the job's topology: from the bootstrap when it learnt
// the node identities while starting (PMI), else by an Allgather of each
// rank's LocalNode. It is collective in the second case.
func TopologyOf(b Bootstrap) (Topology, error) {
	if nl, ok := b.(nodeLister); ok {
		if ids := nl.Nodes(); ids != nil {
			return NewTopology(b.Rank(), ids), nil
		}
	}
	all, err := b.Allgather([]byte(LocalNode(os.Getenv)))
	if err != nil {
		return Topology{}, err
	}
	ids := make([]string, len(all))
	for r, id := range all {
		ids[r] = string(id)
	}
	return NewTopology(b.Rank(), ids), nil
}

// LocalNode is this process's node identity: two ranks share a node exactly
// when their identities are equal. It is RMAGO_NODE when set (tests use it
// to split the ranks of one machine into pretend nodes); otherwise the host
// name, the kernel's boot id and the network namespace, joined with the
// launcher's name for the node when it gives one (Slurm's SLURMD_NODENAME,
// Hydra's MPIR_CVAR_CH3_INTERFACE_HOSTNAME). Network namespaces used as
// pretend hosts share the host name and boot id, but not the namespace.
// The parts only ever split a machine, never join two: ranks wrongly apart
// lose a faster path, ranks wrongly together would break.
func LocalNode(getenv func(string) string) string {
	if v := getenv(config.EnvNode); v != "" {
		return v
	}
	return machineID() + "|" + getenv("SLURMD_NODENAME") + "|" + getenv("MPIR_CVAR_CH3_INTERFACE_HOSTNAME")
}

// machineID identifies this machine and network namespace: where a
// loopback address means the same thing.
func machineID() string {
	host, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	netns, _ := os.Readlink("/proc/self/ns/net")
	return fmt.Sprintf("%s|%s|%s", host, strings.TrimSpace(string(boot)), netns)
}
