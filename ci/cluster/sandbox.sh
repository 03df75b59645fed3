#!/bin/bash
# sandbox.sh CMD [ARGS...]: run CMD in fresh network, PID and mount
# namespaces, so that the cluster tests can reach no network but the ones
# they make, and leave nothing behind:
#  - the only interfaces are lo and an anchor bridge sbx0 (10.77.1.254/24:
#    glibc's getaddrinfo with AI_ADDRCONFIG finds no IPv4 address when only
#    lo is up, and slurmctld then dies, pitfall 13) plus what CMD creates;
#  - /run/netns is a tmpfs of the sandbox's own, so the host names h1..hN
#    never meet namespaces of the machine or of another run;
#  - when CMD exits, or the sandbox is killed (unshare needs SIGKILL; the
#    --kill-child flag then kills CMD), the kernel kills every process left
#    in the PID namespace, and the namespaces, bridges and veths go with it.
set -euo pipefail
[ $# -gt 0 ] || { echo "usage: $0 CMD [ARGS...]" >&2; exit 2; }
exec unshare --net --pid --fork --mount-proc --kill-child -- bash -c '
	set -e
	mkdir -p /run/netns
	mount -t tmpfs -o mode=755 rmago-netns /run/netns
	ip link set lo up
	ip link add sbx0 type bridge
	ip addr add 10.77.1.254/24 dev sbx0
	ip link set sbx0 up
	exec "$@"' sandbox "$@"
