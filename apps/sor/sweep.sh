#!/bin/sh
# sweep.sh: measure the SOR variants on the soft provider and write JSON.
#
#   apps/sor/sweep.sh [out.json]        (default: sor-sweep.json)
#
# Two sweeps, each run being the best of REPS solves (the sequential
# solver's time too) of ITERS iterations:
#   size:  every variant at RANKS_FIXED ranks for n in SIZES;
#   ranks: every variant at n = N_FIXED for ranks in RANKS.
# The output is one JSON object {"size": [...], "ranks": [...]} whose
# records are the app's own -json output (github.com/goccy/go-json):
# system ("sor/<variant>"), variant, ranks, n, seconds, iterations,
# seconds_per_iteration, seq_seconds, speedup, verified, ...
# Plot seconds or speedup against n (size) or ranks (ranks), one line per
# system. Environment overrides: SIZES, RANKS, RANKS_FIXED, N_FIXED,
# VARIANTS, ITERS, REPS, CHECK, PROVIDER; SIZES="" or RANKS="" skips a sweep.
set -eu
cd "$(dirname "$0")/../.."
out=${1:-sor-sweep.json}
SIZES=${SIZES-"128 256 512 1024 2048"}
RANKS=${RANKS-"1 2 3 4"}
RANKS_FIXED=${RANKS_FIXED:-2}
N_FIXED=${N_FIXED:-1024}
VARIANTS=${VARIANTS:-"big split lock pscw get"}
ITERS=${ITERS:-100}
REPS=${REPS:-3}
CHECK=${CHECK:-1}
PROVIDER=${PROVIDER:-soft}

bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
go build -o "$bin/rmarun" ./cmd/rmarun
go build -o "$bin/sor" ./apps/sor

# one RANKS N VARIANT: run once, print its JSON record.
one() {
	echo "sweep: $3 ranks=$1 n=$2" >&2
	"$bin/rmarun" -n "$1" -provider "$PROVIDER" -quiet-prefix -timeout 30m \
		"$bin/sor" -variant "$3" -n "$2" -iters "$ITERS" -check "$CHECK" -reps "$REPS" -json
}

# records FILE: the JSON lines of FILE as a comma-separated list.
records() { sed '$!s/$/,/' "$1"; }

for v in $VARIANTS; do
	for n in $SIZES; do one "$RANKS_FIXED" "$n" "$v"; done
done >"$bin/size"
for v in $VARIANTS; do
	for r in $RANKS; do one "$r" "$N_FIXED" "$v"; done
done >"$bin/ranks"

{
	echo '{"size": ['
	records "$bin/size"
	echo '], "ranks": ['
	records "$bin/ranks"
	echo ']}'
} >"$out"
echo "sweep: wrote $out" >&2
