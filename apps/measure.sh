#!/bin/sh
# measure.sh: run the four kernels besides SOR at 1..4 ranks on the soft
# provider and write their JSON records as one array (apps/sor/sweep.sh
# does SOR). The figures in docs/apps.md come from these two scripts.
#
#   apps/measure.sh [out.json]          (default: apps-measure.json)
#
# Environment overrides: RANKS, REPS, PROVIDER.
set -eu
cd "$(dirname "$0")/.."
out=${1:-apps-measure.json}
RANKS=${RANKS:-"1 2 3 4"}
REPS=${REPS:-3}
PROVIDER=${PROVIDER:-soft}

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/rmarun" ./cmd/rmarun
for app in heat histogram hashtable transpose; do
	go build -o "$bin/$app" "./apps/$app"
done

# run RANKS APP ARGS...: one JSON record.
run() {
	r=$1
	shift
	echo "measure: $* ranks=$r" >&2
	"$bin/rmarun" -n "$r" -provider "$PROVIDER" -quiet-prefix -timeout 30m "$bin/$@" -json
}

for r in $RANKS; do
	run "$r" heat -n 1024 -steps 100 -reps "$REPS"
	run "$r" heat -n 1024 -steps 100 -reps "$REPS" -cols vector
	run "$r" transpose -n 2048 -reps 5
	run "$r" transpose -n 1024 -reps 3 -mode rows
	run "$r" histogram -updates 100000
	run "$r" histogram -updates 100000 -batch
	run "$r" hashtable -keys 2000
done >"$bin/records"
{
	echo '['
	sed '$!s/$/,/' "$bin/records"
	echo ']'
} >"$out"
echo "measure: wrote $out" >&2
