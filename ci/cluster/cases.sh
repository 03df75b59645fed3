#!/bin/bash
# cases.sh: the cluster test cases. test-cluster.sh runs it inside
# sandbox.sh, after building the programs into $BIN. It brings up the hosts
# (network namespaces h1..h3), munge, slurmctld and one slurmd per host,
# then runs every case whose name matches $CASES, each launch under
# timeout, and checks after each one that no process of the job is left on
# any host. It prints a summary (result and wall time of each case) and
# exits 1 if any case failed. Whatever happens, its EXIT trap stops the
# daemons and removes the namespaces (and the sandbox kills anything left).
#
# Pass or fail is decided by the programs themselves wherever they can:
# joincheck checks who joined the job, the ping-pongs verify every element
# they move, the app checks its result against a sequential run; each exits
# non-zero otherwise. The script checks exit statuses, the exact lines the
# programs print on success, the error a program gives when it cannot join
# a launcher, and that a job whose rank was killed ends before the timeout.
set -uo pipefail
shopt -s extglob
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---- settings that depend on the library's PMI and rmarun interfaces ----
# The environment variable choosing rma.Init's PMI wire (1, the default, or 2).
PMI_WIRE_VAR=${PMI_WIRE_VAR:-RMAGO_PMI}
# NAME=value words added to every rank's environment (through env(1));
# the soft provider by default, whatever RDMA devices the machine has.
RANK_ENV=${RANK_ENV-RMAGO_PROVIDER=soft}
# What a program must print on stderr when it cannot join the launcher
# (launch.ErrLauncher).
NOJOIN_RE=${NOJOIN_RE:-launcher rmago cannot join}
# rmarun's multi-host flags: hosts are $NET.i, remote starts go through
# ssh-netns.sh. RMARUN_HOSTS is the flag taking the host list.
RMARUN_HOSTS=${RMARUN_HOSTS:--H}
RMARUN_EXEC=${RMARUN_EXEC:---launcher-exec}
# Run only the cases whose name matches this extended regex.
CASES=${CASES:-.}
# Harness development only: ranks join through dev-join-shim.sh (PMI_RANK
# and PMI_SIZE to rmarun's RMAGO_* contract) instead of through rma.Init's
# own PMI client; rmarun cases are skipped.
DEV_JOIN_SHIM=${DEV_JOIN_SHIM:-0}
# Optional: the path of the recipe's stdlib PMI client, run as extra
# infrastructure cases (not in CI).
PMICLIENT=${PMICLIENT:-}
# How long a job may take to leave no process behind after it ended.
STRAY_WAIT=${STRAY_WAIT:-20}
# Runs of joincheck per launcher, for the start-up time.
STARTUP_REPS=${STARTUP_REPS:-5}
# Launchers killed in the kill-launcher cases.
KILL_LAUNCHER=${KILL_LAUNCHER:-srun1 hydra1 rmarun srunpmix ompi}
# The partition cases: the launchers whose host h2 is cut off for PART_DOWN
# seconds mid-job; the ranks' RMAGO_TIMEOUT (PART_TIMEOUT) must end the job
# with an error matching PART_RE.
PARTITION=${PARTITION-srun1 hydra1 rmarun srunpmix ompi}
PART_TIMEOUT=${PART_TIMEOUT:-3s}
PART_DOWN=${PART_DOWN:-9}
PART_RE=${PART_RE:-timed out waiting for peers}
# Runs of each ping-pong and app case (more to hunt intermittent failures).
REPEAT=${REPEAT:-1}
# The PMIx launchers (srun --mpi=pmix, Open MPI's mpirun.openmpi), whose
# ranks are the programs built with -tags pmix (*-pmix); 0 skips them.
PMIX=${PMIX:-1}
# Open MPI's launcher, called by its own name: mpirun and mpiexec stay
# MPICH's (install.sh). Its remote starts go through ssh-netns.sh. Its
# session directories (ompi.<host>.<uid>/jf.<job family>/..., named after
# the host name, the same in every namespace, and mpirun's pid) go in the
# hosts' node-local $NODE_TMP, made afresh by each run: in the one /tmp,
# the orteds of one job race on the shared tree ("mkdir ... No such file or
# directory"), and those of a killed mpirun stay behind, so that a later
# run in a new sandbox, where pids start again from 1, fails on them
# ("mkdir ... File exists").
OMPI_RUN=${OMPI_RUN:-mpirun.openmpi}
OMPI_FLAGS=(--allow-run-as-root --oversubscribe --mca orte_tmpdir_base "$NODE_TMP")

ip link show sbx0 >/dev/null 2>&1 || die "run cases.sh through sandbox.sh: it makes namespaces and bridges"
LOGS=$WORK/logs
rm -rf "$LOGS" "$WORK/tmp" "$WORK/startup.txt" "$WORK/summary.txt"
mkdir -p "$LOGS" "$WORK/tmp"
SUMMARY=()
FAILS=0
cleanup() {
	local j
	for j in $(jobs -p); do # a launch in progress, not the daemons
		[[ " ${DAEMON_PIDS[*]} " == *" $j "* ]] || kill -9 "$j" 2>/dev/null
	done
	daemons_down
	netns_down
	rm -rf "$WORK/tmp"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT TERM

# ---- recording ----
now() { echo "$EPOCHREALTIME"; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.2f", b-a}'; }
# result NAME ok|FAIL|skip SECONDS NOTE
result() {
	SUMMARY+=("$(printf '%-34s %-5s %7ss  %s' "$1" "$2" "$3" "$4")")
	log "$1: $2 ($3 s) $4"
	if [ "$2" = FAIL ]; then
		FAILS=$((FAILS + 1))
		for f in "$LOGS/$1".{cmd,out,err}; do
			[ -s "$f" ] && { echo "---- $f" >&2; tail -n 15 "$f" >&2; }
		done
	fi
}
selected() { [[ $1 =~ $CASES ]]; }

# ---- launchers ----
# launcher KIND NHOSTS NP sets L, the words that start NP ranks on hosts
# h1..hNHOSTS (block placement: rank r on host r*NHOSTS/NP+1). KIND:
#   srun1, srun2    srun --mpi=pmi2, PMI-1 or PMI-2 wire
#   nopmi           srun without --mpi (MpiDefault=none: no PMI)
#   hydra1, hydra2  MPICH Hydra mpiexec over ssh-netns.sh, PMI-1 or PMI-2 wire
#   rmarun          rmarun -H over ssh-netns.sh
#   srunpmix        srun --mpi=pmix (PMIx, Slurm's pmix plugin)
#   ompi            Open MPI's mpirun (PMIx, orted) over ssh-netns.sh
# W, the words put before the program (env with the rank settings), and X,
# the suffix of the programs to run: -pmix for the PMIx launchers.
launcher() {
	local kind=$1 nh=$2 np=$3 hosts ppn=$((($3 + $2 - 1) / $2))
	hosts=$(seq -s, -f "$NET.%g" 1 "$nh")
	read -ra W <<<"env $RANK_ENV"
	X=
	case $kind in
	srunpmix | ompi) X=-pmix ;;
	esac
	case $kind in
	srun[12] | hydra[12]) W+=("$PMI_WIRE_VAR=${kind: -1}") ;;
	esac
	case $kind in
	srun[12]) L=(srun --mpi=pmi2 -N "$nh" -n "$np") ;;
	nopmi) L=(srun -N "$nh" -n "$np") ;;
	hydra[12])
		# -localhost: the proxies dial mpiexec back at the bridge
		# address, not at `hostname` (127.0.0.1 in every host: docs/launch-cluster.md, pitfall 1).
		L=(mpiexec -launcher ssh -launcher-exec "$CLUSTER_DIR/ssh-netns.sh" -localhost "$NET.254"
			-hosts "$hosts" -ppn "$ppn" -n "$np") ;;
	rmarun) # -H host:slots, as Open MPI's mpirun
		[ "$ppn" -gt 1 ] && hosts=$(seq -s, -f "$NET.%g:$ppn" 1 "$nh")
		L=("$BIN/rmarun" "$RMARUN_HOSTS" "$hosts" "$RMARUN_EXEC" "$CLUSTER_DIR/ssh-netns.sh" -n "$np") ;;
	srunpmix) L=(srun --mpi=pmix -N "$nh" -n "$np") ;;
	ompi) # --host h:slots; ranks fill the slots in order (block placement)
		[ "$ppn" -gt 1 ] && hosts=$(seq -s, -f "$NET.%g:$ppn" 1 "$nh")
		L=("$OMPI_RUN" "${OMPI_FLAGS[@]}" --mca plm_rsh_agent "$CLUSTER_DIR/ssh-netns.sh" --host "$hosts" -n "$np") ;;
	*) die "launcher $kind?" ;;
	esac
	if [ "$DEV_JOIN_SHIM" = 1 ] && [ "$kind" != nopmi ]; then W+=("$CLUSTER_DIR/dev-join-shim.sh"); fi
}

# run NAME CMD...: runs CMD under the timeout, its input /dev/null, its
# output in $LOGS/NAME.out and .err; sets RC and SECS.
run() {
	local name=$1 t0
	shift
	printf '%q ' "$@" >"$LOGS/$name.cmd"
	echo >>"$LOGS/$name.cmd"
	t0=$(now)
	tmo "$@" <"/dev/null" >"$LOGS/$name.out" 2>"$LOGS/$name.err"
	RC=$?
	SECS=$(since "$t0")
}
timed_out() { [ "$RC" = 124 ] || awk -v s="$SECS" -v t="$TMO" 'BEGIN{exit !(s >= t - 1)}'; }

# ---- processes left behind ----
# strays lists the processes of jobs still alive on any host or on the
# head: our programs, Hydra's proxies, mpiexec, srun, the ssh stand-in,
# and Open MPI's mpirun (orterun) and orted.
strays() {
	local p pid exe cmd
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		exe=$(readlink "$p/exe" 2>/dev/null) || continue
		cmd=$(tr '\0' ' ' <"$p/cmdline" 2>/dev/null)
		case "$exe $cmd" in
		"$BIN"/* | */hydra_pmi_proxy* | */mpiexec* | */srun* | *ssh-netns.sh* | */orted* | */orterun* | */mpirun*)
			echo "pid $pid on ${HOSTOF[$(stat -L -c %i "$p/ns/net" 2>/dev/null)]:-?}: ${cmd:0:120}" ;;
		esac
	done
}
declare -A HOSTOF
map_hosts() {
	local i
	HOSTOF[$(stat -L -c %i /proc/self/ns/net)]="head"
	for i in $(seq 1 "$NHOSTS"); do HOSTOF[$(stat -L -c %i "/run/netns/h$i")]=h$i; done
}
# no_strays NAME: waits up to STRAY_WAIT s for the job's processes to be
# gone; if some stay, lists them in NAME.strays, kills them and fails.
no_strays() {
	local s end=$((SECONDS + STRAY_WAIT))
	while :; do
		s=$(strays)
		[ -z "$s" ] && return 0
		[ "$SECONDS" -ge "$end" ] && break
		sleep 0.2
	done
	echo "$s" >"$LOGS/$1.strays"
	awk '{print $2}' <<<"$s" | xargs -r kill -9 2>/dev/null
	STRAYS=$(wc -l <<<"$s")
	return 1
}
# pids_on HOST EXE: the pids of EXE running on HOST.
pids_on() {
	local p
	for p in $(ip netns pids "$1"); do
		[ "$(readlink "/proc/$p/exe" 2>/dev/null)" = "$2" ] && echo "$p"
	done
}

# ---- the checks ----
# expect_ok NAME PATTERN CMD...: CMD must exit 0 and print a line matching
# the extended regex PATTERN on stdout; then no process may be left.
expect_ok() {
	local name=$1 pat=$2
	shift 2
	selected "$name" || return 0
	local note='' i
	for i in $(seq 1 "$REPEAT"); do
		run "$name" "$@"
		if [ "$RC" != 0 ]; then
			timed_out && note="timed out" || note="exit status $RC"
		elif ! grep -Eq "$pat" "$LOGS/$name.out"; then
			note="no line matches /$pat/"
		fi
		if ! no_strays "$name"; then note+="${note:+; }$STRAYS processes left (see $name.strays)"; fi
		[ -n "$note" ] && { [ "$REPEAT" = 1 ] || note="run $i of $REPEAT: $note"; break; }
	done
	local info
	info=$(grep -Eo "$pat" "$LOGS/$name.out" 2>/dev/null | head -n 1)
	if [ -z "$note" ]; then result "$name" ok "$SECS" "$info"; else result "$name" FAIL "$SECS" "$note"; fi
}

# expect_fail NAME ERR_RE CMD...: CMD must exit non-zero before the timeout
# and print a line matching ERR_RE on stderr; no process may be left.
expect_fail() {
	local name=$1 pat=$2
	shift 2
	selected "$name" || return 0
	run "$name" "$@"
	local note=
	if [ "$RC" = 0 ]; then
		note="exit status 0, want a failure"
	elif timed_out; then
		note="timed out instead of failing"
	elif ! grep -Eq "$pat" "$LOGS/$name.err"; then
		note="exit status $RC but no line on stderr matches /$pat/"
	fi
	if ! no_strays "$name"; then note+="${note:+; }$STRAYS processes left (see $name.strays)"; fi
	if [ -z "$note" ]; then
		result "$name" ok "$SECS" "exit $RC: $(grep -Em1 "$pat" "$LOGS/$name.err" | cut -c1-100)"
	else
		result "$name" FAIL "$SECS" "$note"
	fi
}

# expect_kill NAME KIND rank|launcher: a 3-host job of pingpong onemany
# that would run for hours; once a rank runs on every host and the job has
# joined, SIGKILL goes to the rank on h2, or to the launcher itself. A
# killed rank must make the launcher exit non-zero before the timeout; in
# both cases no process of the job may be left on any host STRAY_WAIT
# seconds after the launcher ended.
expect_kill() {
	local name=$1 kind=$2 what=$3 t0 tk='' lp end i n victim note='' after=''
	selected "$name" || return 0
	local TMO=$((2 * TMO)) # the job runs until it is killed
	launcher "$kind" 3 3
	local cmd=("${L[@]}" env "RMAGO_TIMEOUT=$PART_TIMEOUT" "${W[@]}" "$BIN/pingpong$X" onemany -min 0 -max 0 -reps 1000000 -iters 100 -no-progress)
	printf '%q ' "${cmd[@]}" >"$LOGS/$name.cmd"
	t0=$(now)
	tmo "${cmd[@]}" </dev/null >"$LOGS/$name.out" 2>"$LOGS/$name.err" &
	lp=$!
	end=$((SECONDS + 30))
	while kill -0 "$lp" 2>/dev/null && [ "$SECONDS" -lt "$end" ]; do
		n=0
		for i in 1 2 3; do [ -n "$(pids_on "h$i" "$BIN/pingpong$X")" ] && n=$((n + 1)); done
		[ "$n" = 3 ] && break
		sleep 0.2
	done
	# The root prints its header once the job has joined; then let it run.
	for _ in $(seq 1 50); do
		grep -q '^\(\[0\] \)\?# rmago' "$LOGS/$name.out" 2>/dev/null && break
		kill -0 "$lp" 2>/dev/null || break
		sleep 0.2
	done
	sleep 1
	if [ "$what" = rank ]; then
		victim=$(pids_on h2 "$BIN/pingpong$X" | head -n 1)
	elif [ "$what" = partition ]; then
		victim=v77h2
	else
		# the launcher: below the subshell and timeout that run it
		victim=$lp
		while [ -n "$victim" ] && [[ $(readlink "/proc/$victim/exe") == */@(bash|timeout) ]]; do
			victim=$(pgrep -P "$victim" | head -n 1)
		done
	fi
	if [ -z "$(pids_on h2 "$BIN/pingpong$X")" ] || [ -z "$victim" ] || ! kill -0 "$lp" 2>/dev/null; then
		note="the job was not running on all hosts"
		kill -9 "$lp" 2>/dev/null
	elif [ "$what" = partition ]; then
		# h2 unreachable for longer than the ranks' timeout, then back, so
		# that the launchers' own connections to h2 recover
		ip link set v77h2 down
		tk=$(now)
		sleep "$PART_DOWN"
		ip link set v77h2 up
	else
		kill -9 "$victim"
		tk=$(now)
	fi
	wait "$lp"
	RC=$?
	SECS=$(since "$t0")
	if [ -z "$note" ] && [ "$what" != launcher ]; then
		if [ "$RC" = 0 ]; then
			note="the launcher exited 0"
		elif timed_out; then
			note="the job did not end: timed out"
		elif [ "$what" = partition ] && ! grep -Eq "$PART_RE" "$LOGS/$name.err"; then
			note="exit $RC but no line on stderr matches /$PART_RE/"
		fi
	fi
	if ! no_strays "$name"; then note+="${note:+; }$STRAYS processes left (see $name.strays)"; fi
	[ -n "$tk" ] && after=$(since "$tk")
	if [ -n "$note" ]; then
		result "$name" FAIL "$SECS" "$note"
	elif [ "$what" = rank ]; then
		result "$name" ok "$SECS" "killed rank pid $victim on h2; launcher exit $RC; all gone ${after}s after the kill"
	elif [ "$what" = partition ]; then
		result "$name" ok "$SECS" "h2 cut off for ${PART_DOWN}s; launcher exit $RC; all gone ${after}s after the cut: $(grep -Em1 "$PART_RE" "$LOGS/$name.err" | cut -c1-80)"
	else
		result "$name" ok "$SECS" "killed the launcher (pid $victim); all ranks gone ${after}s after the kill"
	fi
}

# expect_join KIND: joincheck with 3 ranks, one per host, STARTUP_REPS
# times: each run must print exactly that the 3 ranks on h1, h2 and h3
# joined one job. The wall times of the runs are the start-up time of a
# 3-host job under that launcher (written to $WORK/startup.txt).
expect_join() {
	local kind=$1 name=join-$1 i times=() note='' init=''
	selected "$name" || return 0
	launcher "$kind" 3 3
	local want="joincheck: ok size=3 hosts=$NET.1,$NET.2,$NET.3"
	for i in $(seq 1 "$STARTUP_REPS"); do
		run "$name" "${L[@]}" "${W[@]}" "$BIN/joincheck$X" -n 3 -hosts 3
		if [ "$RC" != 0 ]; then
			timed_out && note="run $i timed out" || note="run $i: exit status $RC"
		elif ! sed 's/^\[0\] //' "$LOGS/$name.out" | grep -qxF "$want"; then
			note="run $i did not print '$want'"
		fi
		no_strays "$name" || note+="${note:+; }$STRAYS processes left (see $name.strays)"
		[ -n "$note" ] && break
		times+=("$SECS")
		# the slowest rank's Init, in ms
		init+="$(sed -n 's/^\(\[0\] \)\?joincheck: init slowest \([^ ]*\).*/\2/p' "$LOGS/$name.out" |
			awk '/ms$/{print $1+0 "ms"; next} /µs$/{printf "%.3fms\n", $1/1000; next} /s$/{print $1*1000 "ms"}') "
	done
	if [ -n "$note" ]; then
		result "$name" FAIL "$SECS" "$note"
		return 1
	fi
	local stats imed
	stats=$(printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END{printf "min %s median %s max %s", a[1], a[int((NR+1)/2)], a[NR]}')
	# shellcheck disable=SC2086 # one word per run
	imed=$(printf '%s\n' $init | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')
	printf '%-8s wall %s s; slowest rank'"'"'s Init median %s (%d runs)\n' "$kind" "$stats" "$imed" "$STARTUP_REPS" >>"$WORK/startup.txt"
	result "$name" ok "$SECS" "3 ranks on 3 hosts; wall $stats s; Init median $imed"
}

# ---- bring up the cluster ----
t0=$(now)
netns_up
result setup-hosts ok "$(since "$t0")" "$NHOSTS network namespaces on $BR"
map_hosts
t0=$(now)
slurm_up
result setup-slurm ok "$(since "$t0")" "munged, slurmctld, $NHOSTS slurmds idle"

# ---- infrastructure, without rmago ----
# whereami: where a started process really is, and whether it got PMI.
want_where=$(for r in 0 1 2 3 4 5; do echo "rank=$r host=h$((r / 2 + 1)) pmi=fd"; done)
check_where() { # NAME: the output lists exactly want_where
	local name=$1 got
	selected "$name" || return 0
	got=$(sed 's/^\[[0-9]*\] //' "$LOGS/$name.out" | sort -t= -k2 -n)
	if [ "$RC" = 0 ] && [ "$got" = "$want_where" ]; then
		result "$name" ok "$SECS" "6 processes, 2 on each of h1..h3, each with PMI_FD"
	else
		result "$name" FAIL "$SECS" "exit $RC, placement: $(tr '\n' ' ' <<<"$got")"
	fi
}
if selected pre-srun; then
	launcher srun1 3 6
	run pre-srun "${L[@]}" "$BIN/whereami"
	check_where pre-srun
	no_strays pre-srun || result pre-srun-strays FAIL 0 "$STRAYS processes left"
fi
if selected pre-hydra; then
	launcher hydra1 3 6
	run pre-hydra "${L[@]}" "$BIN/whereami"
	check_where pre-hydra
	no_strays pre-hydra || result pre-hydra-strays FAIL 0 "$STRAYS processes left"
fi
if selected pre-ssh; then
	# the stand-in maps hosts to namespaces, gives a clean environment,
	# relays input and output, and returns the remote exit status
	t0=$(now)
	# shellcheck disable=SC2016 # expanded on the remote side
	got=$(echo relayed | "$CLUSTER_DIR/ssh-netns.sh" -x "$NET.2" 'read l; echo "$(ip netns identify $$) $l ${WORK:-clean}"; exit 7')
	rc=$?
	want="h2 relayed clean"
	if [ "$rc" = 7 ] && [ "$got" = "$want" ]; then
		result pre-ssh ok "$(since "$t0")" "$NET.2 -> h2, input relayed, clean environment, exit status kept"
	else
		result pre-ssh FAIL "$(since "$t0")" "got '$got' exit $rc, want '$want' exit 7"
	fi
	no_strays pre-ssh || result pre-ssh-strays FAIL 0 "$STRAYS processes left"
	# a killed client: the remote side reads end of file and ends
	t0=$(now)
	sleep 60 | "$CLUSTER_DIR/ssh-netns.sh" "$NET.3" 'exec cat' >/dev/null &
	sp=$!
	for _ in $(seq 1 50); do [ -n "$(pids_on h3 /usr/bin/cat)" ] && break; sleep 0.1; done
	if [ -z "$(pids_on h3 /usr/bin/cat)" ]; then
		result pre-ssh-kill FAIL "$(since "$t0")" "the remote cat did not start"
	else
		kill -9 "$sp" # the client (the pipeline's last process)
		for _ in $(seq 1 50); do [ -z "$(pids_on h3 /usr/bin/cat)" ] && break; sleep 0.1; done
		gone=$([ -z "$(pids_on h3 /usr/bin/cat)" ] && echo yes)
		pkill -P "$$" -x sleep # the client's input, still open
		wait "$sp" 2>/dev/null
		if no_strays pre-ssh-kill && [ "$gone" = yes ]; then
			result pre-ssh-kill ok "$(since "$t0")" "client killed: the remote command saw end of file and ended"
		else
			result pre-ssh-kill FAIL "$(since "$t0")" "the remote command outlived its killed client"
		fi
	fi
fi
if [ -n "$PMICLIENT" ]; then
	for k in srun1 srun2 hydra1 hydra2; do
		launcher "$k" 3 6
		expect_ok "pre-pmiclient-$k" 'PMIOK.*rank=5 size=6' "${L[@]}" "$PMICLIENT" -wire "${k: -1}"
	done
fi

P='^(\[0\] )?'
# ---- PMIx on one host ----
# The PMIx client (build tag pmix) joins 2 ranks on one host: srun
# --mpi=pmix on node n1, and Open MPI's mpirun run inside h1 (no remote
# start), each with joincheck and the one-to-one ping-pong.
if [ "$PMIX" = 1 ] && [ "$DEV_JOIN_SHIM" != 1 ]; then
	read -ra W <<<"env $RANK_ENV"
	want1="^joincheck: ok size=2 hosts=$NET\\.1\$"
	L=(srun --mpi=pmix -N1 -n2 -w n1)
	expect_ok join-srunpmix-1node "$want1" "${L[@]}" "${W[@]}" "$BIN/joincheck-pmix" -n 2 -hosts 1
	expect_ok pingpong-oneone-srunpmix-1node "${P}# rmago one-to-one ping-pong, .*, 2 ranks," \
		"${L[@]}" "${W[@]}" "$BIN/pingpong-pmix" oneone -quick -no-progress
	L=(ip netns exec h1 "$OMPI_RUN" "${OMPI_FLAGS[@]}" -n 2)
	expect_ok join-ompi-1host "$want1" "${L[@]}" "${W[@]}" "$BIN/joincheck-pmix" -n 2 -hosts 1
	expect_ok pingpong-oneone-ompi-1host "${P}# rmago one-to-one ping-pong, .*, 2 ranks," \
		"${L[@]}" "${W[@]}" "$BIN/pingpong-pmix" oneone -quick -no-progress
fi

# ---- rmago across the hosts ----
# joincheck: 3 ranks, one per host, join one job (its wall time is the
# start-up time of a 3-host job under that launcher); the one-to-one
# ping-pong on 2 hosts; the one-to-many ping-pong with 6 ranks, 2 per host;
# the heat app on 3 hosts.
KINDS="srun1 hydra1 hydra2 rmarun"
[ "$PMIX" = 1 ] && KINDS+=" srunpmix ompi"
[ "$DEV_JOIN_SHIM" = 1 ] && KINDS="srun1 hydra1 hydra2"
# A launcher whose join case fails gets its other cases skipped: they
# would fail the same way, each after its timeout if the join hangs.
declare -A BROKEN
skip() { # skip NAME KIND
	selected "$1" && result "$1" skip 0 "join-$2 failed"
}
for k in $KINDS; do
	if ! expect_join "$k"; then
		BROKEN[$k]=1
		for c in pingpong-oneone pingpong-onemany app-heat; do skip "$c-$k" "$k"; done
		continue
	fi
	[ "$k" = srun1 ] && expect_join srun2
	launcher "$k" 2 2
	expect_ok "pingpong-oneone-$k" "${P}# rmago one-to-one ping-pong, .*, 2 ranks," "${L[@]}" "${W[@]}" "$BIN/pingpong$X" oneone -quick -no-progress
	launcher "$k" 3 6
	expect_ok "pingpong-onemany-$k" "${P}# rmago one-to-many ping-pong, .*, 6 ranks," "${L[@]}" "${W[@]}" "$BIN/pingpong$X" onemany -quick -no-progress
	launcher "$k" 3 3
	expect_ok "app-heat-$k" "${P}heat/pscw-pack: 3 ranks .*, verified\$" "${L[@]}" "${W[@]}" "$BIN/heat$X" -n 96 -steps 20
done

# ---- negative cases ----
# Data verification is live across hosts: rank 1 corrupts one element.
launcher srun1 2 2
expect_fail corrupt-srun1 'DATA VERIFICATION FAILED' env PINGPONG_TEST_CORRUPT=1 "${L[@]}" "${W[@]}" "$BIN/pingpong" oneone -quick -no-progress
# A launcher rmago cannot join: srun without PMI, Open MPI's environment,
# a PMIx server's (without the pmix build tag).
if [ "$DEV_JOIN_SHIM" != 1 ]; then
	launcher nopmi 3 3
	expect_fail nojoin-srun-nopmi "$NOJOIN_RE" "${L[@]}" "${W[@]}" "$BIN/joincheck" -n 3
	expect_fail nojoin-openmpi-env "$NOJOIN_RE" ip netns exec h1 env OMPI_COMM_WORLD_SIZE=3 OMPI_COMM_WORLD_RANK=0 \
		OMPI_COMM_WORLD_LOCAL_RANK=0 "$BIN/joincheck" -n 3
	expect_fail nojoin-pmix-env "$NOJOIN_RE" ip netns exec h1 env PMIX_RANK=0 PMIX_NAMESPACE=prterun-h1-1@1 \
		"$BIN/joincheck" -n 3
	# and the real PMIx launchers, with the program built without the tag
	if [ "$PMIX" = 1 ]; then
		launcher srunpmix 2 2
		expect_fail nojoin-srunpmix-notag "$NOJOIN_RE.*PMIx" "${L[@]}" "${W[@]}" "$BIN/joincheck" -n 2
		launcher ompi 2 2
		expect_fail nojoin-ompi-notag "$NOJOIN_RE.*PMIx" "${L[@]}" "${W[@]}" "$BIN/joincheck" -n 2
	fi
fi
# A rank killed on one host ends the whole job.
for k in $KINDS; do
	if [ -n "${BROKEN[$k]:-}" ]; then skip "kill-rank-$k" "$k"; else expect_kill "kill-rank-$k" "$k" rank; fi
done
# The launcher killed: its ranks must go on every host (rmarun's when
# their ssh connections drop; srun's and Hydra's through slurmstepd and
# hydra_pmi_proxy; Open MPI's through orted). Launchers not in KINDS (PMIX=0,
# DEV_JOIN_SHIM=1) are left out.
inkinds() { [[ " $KINDS " == *" $1 "* ]]; }
for k in $KILL_LAUNCHER; do
	inkinds "$k" || continue
	if [ -n "${BROKEN[$k]:-}" ]; then skip "kill-launcher-$k" "$k"; else expect_kill "kill-launcher-$k" "$k" launcher; fi
done
# A host cut off the network: the ranks' timeout ends the job with a clear
# error, nothing hangs, nothing is left.
for k in $PARTITION; do
	inkinds "$k" || continue
	if [ -n "${BROKEN[$k]:-}" ]; then skip "partition-$k" "$k"; else expect_kill "partition-$k" "$k" partition; fi
done

{
	printf '%s\n' "---- cluster tests (logs in $LOGS)" "${SUMMARY[@]}"
	if [ -s "$WORK/startup.txt" ]; then
		echo "---- start-up of a 3-host job (joincheck, launcher start to exit)"
		cat "$WORK/startup.txt"
	fi
} | tee "$WORK/summary.txt"
[ "$FAILS" = 0 ] || { log "$FAILS case(s) failed"; exit 1; }
log "all cases passed"
