#!/usr/bin/env bash
# ci/compare/compare.sh (make compare): rmago's ping-pongs beside Open MPI's
# and MPICH's, same protocols (ci/compare/pp.c), same machine, one run.
#
# Systems: rmago on the soft provider (separate processes under rmarun, TCP
# loopback) and on the shm provider (shared memory), Open MPI and MPICH
# forced onto TCP, and both MPIs on their default shared memory. Repetitions are interleaved: ROUNDS rounds, each
# running every mode on every system with REPS repetitions per size (the
# order of the systems rotates every round), so machine drift hits all
# alike; the rounds are then pooled (ROUNDS*REPS repetitions per size, the
# fastest and slowest dropped for the mean).
#
# Writes raw results to $OUT (default /tmp/rmago-compare), plots to
# docs/compare-*.svg/png, and the generated part of docs/benchmarks.md
# (between the compare:begin and compare:end markers). Exits non-zero if
# any run moved wrong data. Every MPI run is guarded by timeout (both MPIs
# hang at exit now and then here); a run that timed out keeps the sizes it
# finished and is listed in the report.
#
# Knobs (environment): ROUNDS=5 REPS=3 MINEXP=0 MAXEXP=20
# MODES="fence3 fence2 pscw lock lockall get" MANY_NS="2 3 4" MANY_MAXEXP=16
# SYSTEMS="rmago-soft rmago-shm ompi-tcp mpich-tcp ompi-shm mpich-shm" TMO=150
# COMPARE_NO_INSTALL=1 (skip apt-get) COMPARE_NO_DOCS=1 (do not touch docs/)
# COMPARE_NO_OSU=1 (skip rmago's OSU-style part) MANY_NS="" (no one-to-many)
# LOADMAX=1.5 LOADWAIT=60: before each one-to-one round, the one-to-many
# part and the OSU part, wait up to LOADWAIT seconds for the 1-minute load
# average to drop to LOADMAX (other jobs on a 2-core
# machine wreck busy-polling MPIs far more than rmago); the load seen is
# reported.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
OUT=${OUT:-/tmp/rmago-compare}
# Five runs of each system (a process-run often sits in one mode of the
# machine throughout, docs/benchmarks.md), three repetitions each: the
# median of the pool is decided by three runs of five, not two of three.
ROUNDS=${ROUNDS:-5}
REPS=${REPS:-3}
MINEXP=${MINEXP:-0}
MAXEXP=${MAXEXP:-20}
MODES=${MODES:-"fence3 fence2 pscw lock lockall get"}
MANY_NS=${MANY_NS-"2 3 4"}
MANY_MAXEXP=${MANY_MAXEXP:-16}
MANY_ITERS=${MANY_ITERS:-20}
SYSTEMS=${SYSTEMS:-"rmago-soft rmago-shm ompi-tcp mpich-tcp ompi-shm mpich-shm"}
TMO=${TMO:-150}
RAW=$OUT/raw
START=$(date +%s)
rm -rf "$RAW"
mkdir -p "$RAW"
LOG=$OUT/commands.log
: >"$LOG"
: >"$OUT/problems.txt"

LOADMAX=${LOADMAX:-1.5}
LOADWAIT=${LOADWAIT:-60}
LOADS=""

# quiet NAME: wait for the machine to be quiet enough, note the load.
quiet() {
	local waited=0 load
	load=$(cut -d' ' -f1 /proc/loadavg)
	while awk -v l="$load" -v m="$LOADMAX" 'BEGIN{exit !(l > m)}' && [ $waited -lt "$LOADWAIT" ]; do
		[ $((waited % 60)) -eq 0 ] && say "load $load > $LOADMAX: waiting for other jobs (up to ${LOADWAIT}s)"
		sleep 10
		waited=$((waited + 10))
		load=$(cut -d' ' -f1 /proc/loadavg)
	done
	if awk -v l="$load" -v m="$LOADMAX" 'BEGIN{exit !(l > m)}'; then
		echo "$1 started with load average $load (above $LOADMAX after waiting ${LOADWAIT}s): other jobs shared the 2 cores" >>"$OUT/problems.txt"
	fi
	LOADS="$LOADS $1: $load;"
}

say() { printf '[compare %4ds] %s\n' $(($(date +%s) - START)) "$*" >&2; }

if [ -z "${COMPARE_NO_INSTALL:-}" ]; then
	say "installing Open MPI and MPICH (apt-get)"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	apt-get install -y -qq openmpi-bin libopenmpi-dev mpich libmpich-dev >/dev/null
fi

say "building"
make -s build
mpicc.openmpi -O2 -Wall -o "$OUT/pp_ompi" ci/compare/pp.c
mpicc.mpich -O2 -Wall -o "$OUT/pp_mpich" ci/compare/pp.c
mpicc.openmpi -O2 -Wall -o "$OUT/putbw_ompi" ci/compare/putbw.c
mpicc.mpich -O2 -Wall -o "$OUT/putbw_mpich" ci/compare/putbw.c

label() {
	case $1 in
	rmago-soft) echo "rmago soft (TCP)" ;;
	rmago-shm) echo "rmago shm" ;;
	ompi-tcp) echo "Open MPI TCP" ;;
	mpich-tcp) echo "MPICH TCP" ;;
	ompi-shm) echo "Open MPI shm" ;;
	mpich-shm) echo "MPICH shm" ;;
	esac
}

# mpilaunch SYSTEM N PROGRAM: an MPI system's launch of N ranks of
# PROGRAM (pp or putbw, built for that MPI), without its arguments.
mpilaunch() {
	local sys=$1 n=$2 prog=$3
	local ompi="mpirun.openmpi --allow-run-as-root -np $n --bind-to core"
	[ "$n" -gt 2 ] && ompi="mpirun.openmpi --allow-run-as-root -np $n --oversubscribe --bind-to none"
	case $sys in
	ompi-tcp) echo "$ompi --mca pml ob1 --mca btl tcp,self --mca osc pt2pt $OUT/${prog}_ompi" ;;
	mpich-tcp) echo "env MPIR_CVAR_NOLOCAL=1 UCX_TLS=tcp,self mpirun.mpich -np $n $OUT/${prog}_mpich" ;;
	ompi-shm) echo "$ompi $OUT/${prog}_ompi" ;;
	mpich-shm) echo "mpirun.mpich -np $n $OUT/${prog}_mpich" ;;
	esac
}

# rmagobind SYSTEM N: rmarun's binding for an rmago system. Over TCP
# (soft) ranks bound to a core each, as Open MPI binds its ranks when
# there are no more than 2 (mpilaunch), move large transfers 15-25 %
# faster and small ones no slower; shm ranks run unbound, which suits
# their wake-ups (docs/launch.md, "Binding").
rmagobind() {
	if [ "$1" = rmago-soft ] && [ "$2" -le 2 ] && [ "$2" -le "$(nproc)" ]; then
		echo "-bind-to core"
	fi
}

# cmdline SYSTEM N BENCH MODE MIN MAX ITERS JSON: the command line for one run.
cmdline() {
	local sys=$1 n=$2 bench=$3 mode=$4 lo=$5 hi=$6 iters=$7 json=$8
	case $sys in
	rmago-*) echo "bin/rmarun -n $n $(rmagobind "$sys" "$n") -provider ${sys#rmago-} -quiet-prefix bin/pingpong $bench -mode $mode -min $lo -max $hi -reps $REPS -warmup 1 -iters $iters -no-progress -label '$(label "$sys")' -json $json" ;;
	*) echo "$(mpilaunch "$sys" "$n" pp) $bench $mode $lo $hi $REPS 1 $iters" ;;
	esac
}

# run SYSTEM N BENCH MODE MIN MAX ITERS ROUND
run() {
	local sys=$1 n=$2 bench=$3 mode=$4 round=$8
	local tag=$sys.$bench.$mode.n$n.r$round
	local cmd rc=0
	cmd=$(cmdline "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$RAW/$tag.json")
	echo "$cmd" >>"$LOG"
	if [ "${sys#rmago-}" != "$sys" ]; then
		eval "timeout $TMO $cmd" >"$RAW/$tag.txt" 2>&1 || rc=$?
	else
		eval "timeout $TMO $cmd" >"$RAW/$tag.csv" 2>"$RAW/$tag.err" || rc=$?
	fi
	if grep -qs "DATA VERIFICATION FAILED\|,BAD," "$RAW/$tag".*; then
		say "FAIL: $tag moved wrong data"
		cat "$RAW/$tag".* >&2
		exit 1
	fi
	if [ $rc -ne 0 ]; then
		echo "$(label "$sys") $bench $mode, $n ranks, round $round: exit $rc$([ $rc -eq 124 ] && echo ' (timed out)')" >>"$OUT/problems.txt"
		say "warning: $tag exited $rc"
	fi
}

# rotate K WORDS...: the words rotated left by K.
rotate() {
	local k=$1
	shift
	local a=("$@")
	local n=${#a[@]}
	for ((i = 0; i < n; i++)); do printf '%s ' "${a[$(((i + k) % n))]}"; done
}

# One untimed small run of every system first, so that the system that
# comes first in round 1 does not pay for a cold machine (page cache,
# caches, the first processes): rmago soft's fence3 at 8 B measured 37 µs
# in the first round of the 11:14 run of 2026-11-28, 16 in the next two.
say "warm-up: one small run of each system, not counted"
mkdir -p "$OUT/warmup"
for sys in $SYSTEMS; do
	cmd=$(cmdline "$sys" 2 oneone fence3 0 0 0 "$OUT/warmup/$sys.json")
	echo "$cmd" >>"$LOG"
	eval "timeout $TMO $cmd" >"$OUT/warmup/$sys.txt" 2>&1 || say "warning: the warm-up of $sys exited $?"
done

say "one-to-one: $ROUNDS rounds x {$MODES} x {$SYSTEMS}, 2^$MINEXP..2^$MAXEXP doubles, $REPS reps per round"
for ((r = 1; r <= ROUNDS; r++)); do
	quiet "one-to-one round $r"
	for mode in $MODES; do
		for sys in $(rotate $((r - 1)) $SYSTEMS); do
			run "$sys" 2 oneone "$mode" "$MINEXP" "$MAXEXP" 0 "$r"
		done
	done
	say "one-to-one round $r done"
done

say "one-to-many: N in {$MANY_NS}, fence3, 2^0..2^$MANY_MAXEXP doubles"
quiet "one-to-many"
for ((r = 1; r <= ROUNDS; r++)); do
	for n in $MANY_NS; do
		for sys in $(rotate $((r - 1)) $SYSTEMS); do
			# MPICH with more ranks than cores: its busy polling makes one
			# round trip take 10-70 ms (a sweep would run for hours).
			if [ "$n" -gt "$(nproc)" ] || { [ "$n" -gt 2 ] && [ "$(nproc)" -le 2 ]; }; then
				case $sys in mpich-*) continue ;; esac
			fi
			run "$sys" "$n" onemany fence3 0 "$MANY_MAXEXP" "$MANY_ITERS" "$r"
		done
	done
	say "one-to-many round $r done"
done

[ -n "${COMPARE_NO_OSU:-}" ] && OSU_SPECS="" || OSU_SPECS="put_latency:fence,lock,flush,lock_all,pscw get_latency:fence,lock,flush put_bw:flush acc_latency:flush fop_latency:flush cas_latency:flush"
# rmago's OSU-style part runs on each rmago system of SYSTEMS.
OSU_SYS=""
for sys in $SYSTEMS; do case $sys in rmago-*) OSU_SYS="$OSU_SYS $sys" ;; esac; done
[ -z "$OSU_SYS" ] && OSU_SPECS=""
[ -n "$OSU_SPECS" ] && say "OSU-style suite, rmago on$OSU_SYS (MPI's OSU 7.4 figures: docs/baselines.md)" && quiet "OSU-style suite"
for sys in $OSU_SYS; do
	# Bound as in the one-to-one part (rmagobind), as the MPIs' putbw is.
	OSU="bin/rmarun -n 2 $(rmagobind "$sys" 2) -provider ${sys#rmago-} -quiet-prefix bin/pingpong osu -no-progress -label '$(label "$sys")'"
	for spec in $OSU_SPECS; do
		set -- ${spec/:/ }
		j=$RAW/osu.$sys.$1
		cmd="$OSU -b $1 -s $2 -m 8:1048576 -i 500 -x 50 -json $j.json"
		[ "$1" = put_bw ] && cmd="$OSU -b $1 -s $2 -m 8:1048576 -json $j.json"
		[ "$1" = acc_latency ] && cmd="$OSU -b $1 -s $2 -m 8:4096 -i 200 -x 20 -json $j.json"
		echo "$cmd" >>"$LOG"
		rc=0
		eval "timeout $TMO $cmd" >"$j.txt" 2>&1 || rc=$?
		if grep -q "DATA VERIFICATION FAILED" "$j.txt"; then
			cat "$j.txt" >&2
			exit 1
		fi
		[ $rc -eq 0 ] || echo "$(label "$sys") osu $1 -s $2: exit $rc" >>"$OUT/problems.txt"
	done
done

# The MPIs' put bandwidth in this run (ci/compare/putbw.c: rmago's
# put_bw -s flush, definition for definition; OSU itself is not built here).
OSU_MPI=""
if [ -n "$OSU_SPECS" ]; then
	for sys in $SYSTEMS; do
		case $sys in rmago-*) continue ;; esac
		j=$RAW/osu.$sys.put_bw
		cmd="$(mpilaunch "$sys" 2 putbw) '$(label "$sys")' 8 1048576 64"
		echo "$cmd" >>"$LOG"
		rc=0
		eval "timeout $TMO $cmd" >"$j.json" 2>"$j.err" || rc=$?
		if grep -q "DATA VERIFICATION FAILED" "$j.err"; then
			cat "$j.err" >&2
			exit 1
		fi
		if [ $rc -eq 0 ]; then OSU_MPI="$OSU_MPI $sys"; else echo "$(label "$sys") putbw: exit $rc" >>"$OUT/problems.txt"; fi
	done
fi

say "merging, tables, plots"
PP=bin/pingpong
JSONS=()
for sys in $SYSTEMS; do
	files=$(ls "$RAW/$sys".*.json "$RAW/$sys".*.csv 2>/dev/null | xargs -r grep -l . || true)
	[ -z "$files" ] && continue
	prov=tcp
	case $sys in *-shm) prov=shm ;; esac
	# shellcheck disable=SC2086
	$PP import -o "$OUT/$sys.json" -system "$(label "$sys")" -provider $prov $files
	JSONS+=("$OUT/$sys.json")
done
OSU_JSONS=()
for sys in $OSU_SYS; do
	[ -n "$OSU_SPECS" ] || break
	$PP import -o "$OUT/osu-$sys.json" -system "$(label "$sys")" "$RAW"/osu."$sys".*.json
	OSU_JSONS+=("$OUT/osu-$sys.json")
done
for sys in $OSU_MPI; do
	$PP import -o "$OUT/osu-$sys.json" -system "$(label "$sys")" -provider "${sys#*-}" "$RAW/osu.$sys.put_bw.json"
	OSU_JSONS+=("$OUT/osu-$sys.json")
done

# The issues' goals against this run (pingpong/goals.go), also on the
# terminal.
$PP goals "$OUT" >"$OUT/goals.md"
cat "$OUT/goals.md"

[ -n "${COMPARE_NO_DOCS:-}" ] && { say "done (COMPARE_NO_DOCS: docs untouched), results in $OUT"; exit 0; }

$PP plot -o docs/compare-oneone.svg -bench oneone -cols 2 "${JSONS[@]}" >/dev/null
$PP plot -o docs/compare-onemany.svg -bench onemany -cols 3 "${JSONS[@]}" >/dev/null
$PP plot -o docs/compare-onemany-by-n.svg -bench onemany -x ranks -size 8 -cols 1 "${JSONS[@]}" >/dev/null
# The OSU-style plot draws the MPIs' OSU 7.4 figures of docs/baselines.md
# (ci/compare/baseline, an earlier run: this script does not build OSU)
# beside rmago's, in the one-to-one plot's order, so each system keeps its
# colour.
OSU_BASE=(ci/compare/baseline/osu-ompi-tcp.json ci/compare/baseline/osu-mpich-tcp.json ci/compare/baseline/osu-ompi-shm.json)
[ ${#OSU_JSONS[@]} -gt 0 ] && $PP plot -o docs/compare-osu.svg -cols 3 "${OSU_JSONS[@]}" "${OSU_BASE[@]}" >/dev/null

GEN=$OUT/generated.md
{
	echo "<!-- compare:begin (generated by make compare on $(date -u +%Y-%m-%d); edit outside the markers) -->"
	echo
	echo "Run of $(date -u '+%Y-%m-%d %H:%M UTC'), $(($(date +%s) - START)) s."
	echo "Machine: $(nproc) vCPU ($(lscpu 2>/dev/null | sed -n 's/^Model name: *//p' | head -1)), $(free -g | awk '/Mem:/{print $2}') GiB,"
	echo "$(. /etc/os-release && echo "$PRETTY_NAME"), kernel $(uname -r), $(go version | cut -d' ' -f3),"
	echo "$(mpirun.openmpi --version 2>/dev/null | head -1), $(mpirun.mpich --version 2>/dev/null | sed -n 's/^ *Version: *//p' | head -1 | sed 's/^/MPICH /'), gcc $(gcc -dumpfullversion)."
	echo "Load average (1 min) at the start of each part:$LOADS"
	echo "Rounds: $ROUNDS interleaved rounds x $REPS repetitions per size = $((ROUNDS * REPS)) repetitions; the mean drops the fastest and slowest."
	echo
	echo "### The issues' goals in this run"
	echo
	echo "Each goal of the two performance issues, as a ratio rmago / MPI taken two ways (\`pingpong goals\`): of the pooled medians (every repetition of every round, as in the tables below), and the median of the rounds' own ratios (in a round the systems run one after the other, and a change of the machine's speed between runs moves both)."
	echo
	cat "$OUT/goals.md"
	echo
	echo "### One-to-one, every mode"
	echo
	echo "![one-to-one](compare-oneone.png)"
	$PP table -base "rmago soft (TCP)" -bench oneone "${JSONS[@]}"
	echo
	echo "### One-to-many (fence3), by size and by N"
	echo
	echo "![one-to-many by size](compare-onemany.png)"
	echo
	echo "![one-to-many by N, 8 bytes](compare-onemany-by-n.png)"
	$PP table -base "rmago soft (TCP)" -bench onemany -bytes 8,1024,65536,524288 "${JSONS[@]}"
	echo
	echo "### OSU-style suite"
	echo
	echo "rmago's OSU-style suite in this run. The MPIs' put_bw columns are this run's too (ci/compare/putbw.c, the same definition); their other lines and columns, labelled (OSU 7.4), are OSU figures from an earlier run ([baselines.md](baselines.md)): compare those with care."
	echo
	echo "![OSU-style](compare-osu.png)"
	[ ${#OSU_JSONS[@]} -gt 0 ] && $PP table -bytes 8,1024,65536,1048576 "${OSU_JSONS[@]}" "${OSU_BASE[@]}"
	echo
	echo "### Problems during the run"
	echo
	if [ -s "$OUT/problems.txt" ]; then sed 's/^/- /' "$OUT/problems.txt"; else echo "None."; fi
	echo
	echo "### Exact commands (in the order run; OUT=$OUT)"
	echo
	echo '```sh'
	awk '!seen[$0]++' "$LOG" | sed -E 's/\.r[0-9]+\.json/.rN.json/' | awk '!seen[$0]++'
	echo '```'
	echo
	echo "<!-- compare:end -->"
} >"$GEN"

DOC=docs/benchmarks.md
if grep -q '<!-- compare:begin' "$DOC"; then
	awk -v gen="$GEN" '
		/<!-- compare:begin/ { while ((getline line < gen) > 0) print line; skip = 1; next }
		/<!-- compare:end -->/ { skip = 0; next }
		!skip { print }' "$DOC" >"$DOC.new"
	mv "$DOC.new" "$DOC"
else
	{ echo; echo "## Comparison with MPI (make compare)"; echo; cat "$GEN"; } >>"$DOC"
fi
say "done: docs/benchmarks.md, docs/compare-*.svg/png; raw results in $OUT"
