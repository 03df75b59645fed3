#!/bin/bash
# test-cluster.sh: rmago across hosts (make test-cluster). As root: installs
# the packages (install.sh; SKIP_INSTALL=1 skips it), builds rmarun,
# pingpong, the heat app and joincheck into $BIN (and the last three again
# with the PMIx client, -tags pmix, as *-pmix), then runs cases.sh inside
# sandbox.sh: fresh network, PID and mount namespaces, so that all traffic
# stays between the namespaces the tests make, and nothing outlives the run.
# docs/launch-cluster.md describes the cases and the settings.
# Settings (see lib.sh and cases.sh): CASES=REGEX runs some cases only,
# TMO=SECONDS bounds each launch, WORK=DIR holds binaries, logs and Slurm
# state (default /tmp/rmago-cluster), SUITE_TMO bounds the whole run.
set -euo pipefail
CLUSTER_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$CLUSTER_DIR/../.." && pwd)
. "$CLUSTER_DIR/lib.sh"
[ "$(id -u)" = 0 ] || die "test-cluster.sh must run as root (namespaces, apt-get, daemons)"
export PATH=$PATH:/usr/local/go/bin
t0=$EPOCHREALTIME
if [ "${SKIP_INSTALL:-0}" != 1 ]; then
	log "installing packages"
	"$CLUSTER_DIR/install.sh"
fi
t1=$EPOCHREALTIME
log "building into $BIN"
mkdir -p "$BIN"
(
	cd "$ROOT"
	export CGO_ENABLED=0
	"${GO:-go}" build -o "$BIN/rmarun" ./cmd/rmarun
	"${GO:-go}" build -o "$BIN/pingpong" ./pingpong
	"${GO:-go}" build -o "$BIN/heat" ./apps/heat
	"${GO:-go}" build -o "$BIN/joincheck" ./ci/cluster/joincheck
)
# The PMIx client (cgo against libpmix, build tag pmix): vetted here, where
# libpmix-dev is installed, and built into *-pmix programs for the cases of
# srun --mpi=pmix and Open MPI's mpirun (PMIX=0 skips them).
[ "${PMIX:-1}" = 0 ] || (
	cd "$ROOT"
	g() { CGO_ENABLED=1 "${GO:-go}" "$@"; }
	g vet -tags pmix ./internal/... ./transport
	g build -tags pmix -o "$BIN/joincheck-pmix" ./ci/cluster/joincheck
	g build -tags pmix -o "$BIN/pingpong-pmix" ./pingpong
	g build -tags pmix -o "$BIN/heat-pmix" ./apps/heat
)
cat >"$BIN/whereami" <<'EOS'
#!/bin/sh
# where a launched process runs, and whether it was given a PMI descriptor
echo "rank=${PMI_RANK:-?} host=$(ip netns identify $$) pmi=${PMI_FD:+fd}"
EOS
chmod +x "$BIN/whereami"
t2=$EPOCHREALTIME
log "install $(awk -v a="$t0" -v b="$t1" 'BEGIN{printf "%.1f", b-a}') s, build $(awk -v a="$t1" -v b="$t2" 'BEGIN{printf "%.1f", b-a}') s"
# The sandbox ignores SIGTERM; SIGKILL ends it and everything inside.
exec timeout -k 10 "${SUITE_TMO:-600}" "$CLUSTER_DIR/sandbox.sh" "$CLUSTER_DIR/cases.sh"
