# ci/cluster/lib.sh: settings and helpers of the cluster tests, sourced by
# the other scripts (bash). Adapted from the cluster recipe (network
# namespaces as hosts, Slurm and munge without systemd); see
# docs/launch-cluster.md for the design and the pitfalls it works around.
#
# The simulated cluster: a "head" (the namespace the tests run in, inside
# sandbox.sh) with bridge $BR at $NET.254, and hosts h1..h$NHOSTS, each a
# network namespace whose eth0 is $NET.i/24 on a veth into the bridge. No
# default route, no forwarding: traffic stays between these namespaces.

CLUSTER_DIR=${CLUSTER_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
WORK=${WORK:-/tmp/rmago-cluster}   # everything made at run time
BIN=$WORK/bin                      # the programs, built by test-cluster.sh
NHOSTS=${NHOSTS:-3}
BR=${BR:-br77}
NET=${NET:-10.77.0}
TMO=${TMO:-45}                     # seconds allowed for any one launch
SLURMCTLD_PORT=${SLURMCTLD_PORT:-16817}  # not Slurm's defaults (6817/6818)
SLURMD_PORT=${SLURMD_PORT:-16818}
# The hosts' node-local temporary directory: one path, $NODE_TMP, that is
# a different directory on each host ($NODE_TMP.d/hI), as /tmp is on real
# nodes. The hosts share the machine's file system otherwise (binaries and
# logs under $WORK, as a cluster's shared file system); a process started
# on host hI through slurmd or ssh-netns.sh runs in a mount namespace where
# $NODE_TMP is hI's own (host_tmp_exec). PMIx servers put their per-node
# directories there: Slurm's pmix plugin (spmix_appdir_*, mpi.conf) and
# Open MPI's orted (orte_tmpdir_base), which both fail with "File exists"
# (or race) when the hosts share the directory (pitfall 11).
NODE_TMP=$WORK/nodetmp
export WORK BIN NHOSTS BR NET CLUSTER_DIR NODE_TMP

log() { printf '%s [cluster] %s\n' "$(date +%T)" "$*" >&2; }
die() { log "FAIL: $*"; exit 1; }

# tmo CMD...: every launch runs under timeout: a failed launch can make
# mpiexec or srun wait for ever (pitfall 2). Exit 124 means it timed out.
tmo() { timeout -k 5 "$TMO" "$@"; }

# host_tmp_exec I CMD...: execs CMD in a new mount namespace where
# $NODE_TMP is host hI's node-local directory. (ssh-netns.sh does the same.)
host_tmp_exec() {
	local i=$1
	shift
	# shellcheck disable=SC2016 # the inner shell expands them
	exec unshare --mount --propagation private -- /bin/sh -c \
		'mount --bind "$1" "$2" && shift 2 && exec "$@"' sh "$NODE_TMP.d/h$i" "$NODE_TMP" "$@"
}

# ---- hosts: network namespaces h1..hN on bridge $BR ----

netns_up() {
	local i out ok
	ip link add "$BR" type bridge
	ip addr add "$NET.254/24" dev "$BR"
	ip link set "$BR" up
	rm -rf "$NODE_TMP" "$NODE_TMP.d"
	mkdir -p "$NODE_TMP"
	for i in $(seq 1 "$NHOSTS"); do
		mkdir -p "$NODE_TMP.d/h$i"
		ip netns add "h$i"
		ip link add "v77h$i" type veth peer name eth0 netns "h$i"
		ip link set "v77h$i" master "$BR" up
		ip -n "h$i" link set lo up
		ip -n "h$i" addr add "$NET.$i/24" dev eth0
		ip -n "h$i" link set eth0 up
	done
	# A connect to a closed port on the head that is refused proves the
	# path from each host (no ping needed).
	for i in $(seq 1 "$NHOSTS"); do
		ok=
		for _ in $(seq 1 50); do
			out=$(ip netns exec "h$i" timeout 2 bash -c "exec 3<>/dev/tcp/$NET.254/9" 2>&1) && { ok=1; break; }
			case $out in *refused*) ok=1; break ;; esac
			sleep 0.1
		done
		[ -n "$ok" ] || die "h$i cannot reach $NET.254: $out"
	done
}

netns_down() {
	local i
	for i in $(seq 1 "$NHOSTS"); do
		ip netns del "h$i" 2>/dev/null || true
		ip link del "v77h$i" 2>/dev/null || true
	done
	ip link del "$BR" 2>/dev/null || true
	rm -rf "$NODE_TMP" "$NODE_TMP.d"
}

# ---- munge and Slurm, no systemd: daemons are children of this shell ----
# One munged (its unix socket serves every namespace), one slurmctld on the
# head, one slurmd per host (slurmd_node).

DAEMON_PIDS=()
S=${S:-$WORK/slurm}

munge_up() {
	mkdir -p "$S/munge-etc" "$S/munge-run" "$S/log"
	chmod 700 "$S/munge-etc"
	chmod 755 "$S" "$S/munge-run" # munged wants its socket directory a+x
	mungekey --create --keyfile="$S/munge-etc/munge.key"
	munged -F --socket="$S/munge-run/munge.socket" --key-file="$S/munge-etc/munge.key" \
		--log-file="$S/log/munged.log" --pid-file="$S/munge-run/munged.pid" \
		--seed-file="$S/munge-etc/munged.seed" >"$S/log/munged.out" 2>&1 &
	DAEMON_PIDS+=($!)
	for _ in $(seq 1 50); do [ -S "$S/munge-run/munge.socket" ] && break; sleep 0.1; done
	munge -S "$S/munge-run/munge.socket" -n | unmunge -S "$S/munge-run/munge.socket" >/dev/null ||
		{ cat "$S/log/munged.out" >&2; die "munged does not work"; }
}

slurm_conf() {
	{
		cat <<EOC
ClusterName=rmago
SlurmctldHost=$(hostname -s)($NET.254)
SlurmctldPort=$SLURMCTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$S/munge-run/munge.socket
StateSaveLocation=$S/state
SlurmdSpoolDir=$S/spool/%n
SlurmctldPidFile=$S/slurmctld.pid
SlurmdPidFile=$S/slurmd-%n.pid
SlurmctldLogFile=$S/log/slurmctld.log
SlurmdLogFile=$S/log/slurmd-%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SchedulerType=sched/builtin
MpiDefault=none
ReturnToService=2
SlurmdParameters=config_overrides
EOC
		for i in $(seq 1 "$NHOSTS"); do
			echo "NodeName=n$i NodeAddr=$NET.$i CPUs=2 RealMemory=1000 State=UNKNOWN"
		done
		echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES"
	} >"$S/slurm.conf"
	# srun --mpi=pmix: the pmix plugin of each node's slurmstepd creates
	# the directory spmix_appdir_<uid>_<job>.<step> under this base (by
	# default /tmp), and fails if it exists: a node-local directory.
	echo "PMIxCliTmpDirBase=$NODE_TMP" >"$S/mpi.conf"
}

# slurmd_node I: runs the slurmd of node nI (in the foreground: the caller
# puts it in the background) in host hI's network namespace (nsenter --net,
# not "ip netns exec", which remounts /sys and hides the cgroup tree slurmd
# wants: pitfall 7), with hI's $NODE_TMP: without it, Slurm's pmix plugin on
# the second node finds the first one's spmix_appdir and the step fails
# (pitfall 11). The process execs down to slurmd, so its pid is slurmd's.
slurmd_node() {
	local i=$1
	mkdir -p "$S/spool/n$i"
	host_tmp_exec "$i" nsenter --net="/run/netns/h$i" slurmd -D -N "n$i" -f "$S/slurm.conf"
}

slurm_up() {
	local i got
	rm -rf "$S"
	mkdir -p "$S/state" "$S/log"
	export SLURM_CONF=$S/slurm.conf # every Slurm command reads this file
	munge_up
	slurm_conf
	slurmctld -D -f "$S/slurm.conf" >"$S/log/slurmctld.out" 2>&1 &
	DAEMON_PIDS+=($!)
	for i in $(seq 1 "$NHOSTS"); do
		slurmd_node "$i" >"$S/log/slurmd-n$i.out" 2>&1 &
		DAEMON_PIDS+=($!)
	done
	local end=$((SECONDS + 40))
	while [ "$SECONDS" -lt "$end" ]; do
		for p in "${DAEMON_PIDS[@]}"; do
			kill -0 "$p" 2>/dev/null || { tail -n 5 "$S"/log/*.out >&2; die "a Slurm daemon (pid $p) died: logs in $S/log"; }
		done
		got=$(timeout 5 sinfo -h -N -o '%T' 2>/dev/null | grep -cx idle || true)
		[ "$got" = "$NHOSTS" ] && return 0
		sleep 0.2
	done
	sinfo -N >&2 || true
	tail -n 20 "$S"/log/*.out >&2 || true
	die "only ${got:-0} of $NHOSTS Slurm nodes idle after 40 s"
}

# daemons_down stops what slurm_up started: jobs first, then the slurmds,
# slurmctld and munged (the reverse order), each by its pid.
daemons_down() {
	local i p
	if [ ${#DAEMON_PIDS[@]} -gt 0 ] && [ -e "${SLURM_CONF:-/nonexistent}" ]; then
		local jobs
		mapfile -t jobs < <(timeout 5 squeue -h -o %i 2>/dev/null)
		[ ${#jobs[@]} -gt 0 ] && timeout 10 scancel --full "${jobs[@]}" 2>/dev/null
		true
	fi
	for ((i = ${#DAEMON_PIDS[@]} - 1; i >= 0; i--)); do
		p=${DAEMON_PIDS[$i]}
		kill "$p" 2>/dev/null || true
		for _ in $(seq 1 50); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
		kill -9 "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	DAEMON_PIDS=()
}
