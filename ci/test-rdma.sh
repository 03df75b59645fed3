#!/bin/bash
# test-rdma.sh: the real-RDMA path, proven on Linux Soft-RoCE (rdma_rxe) in a
# QEMU VM (ci/softroce). Builds the ibv-tagged test binaries and commands on
# the host, then inside the VM runs: the verbs/ibv provider tests, the rma
# suite as separate processes under rmarun with the ibv provider (2 and 4
# ranks), the ping-pong, the one-sided latencies and the OSU-style put
# bandwidth on ibv, and perftest's latency and write-bandwidth tests for
# reference (ci/softroce/run.sh --perftest).
# Exits non-zero if anything fails. Extra arguments go to ci/softroce/run.sh.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export RMAGO_VM_DIR=${RMAGO_VM_DIR:-/tmp/rmago-vm}
BIN=$RMAGO_VM_DIR/bin
mkdir -p "$BIN"
"$ROOT/ci/softroce/run.sh" --setup-only >/dev/null # installs libibverbs-dev and friends
cd "$ROOT"
export CGO_ENABLED=1
go build -tags ibv -o "$BIN/rmarun" ./cmd/rmarun
go build -tags ibv -o "$BIN/pingpong" ./pingpong
go test -c -tags ibv -o "$BIN/ibv.test" ./verbs/ibv
go test -c -tags ibv -o "$BIN/rma.test" ./rma
go test -c -tags ibv -o "$BIN/transport.test" ./transport

ENVS="RMAGO_PROVIDER=ibv RMAGO_TIMEOUT=120s"
RUN="rmarun -provider ibv -timeout 10m"
# The whole rma suite runs at each job size; tests written for another
# size skip themselves (rmatest), so together they cover every test.
exec "$ROOT/ci/softroce/run.sh" --perftest \
  --bin "$BIN/rmarun" --bin "$BIN/pingpong" --bin "$BIN/ibv.test" --bin "$BIN/rma.test" --bin "$BIN/transport.test" \
  "$@" -- \
  "ibv.test -test.count=1" \
  "RMAGO_PROVIDER=ibv transport.test -test.count=1 -test.v -test.run 'TestBarrierAndAllgather|TestLeaveBarrierDelivers|TestFlushAfterManyUnsignaled|TestFlushBehindIdleRequest'" \
  "$ENVS $RUN -n 2 rma.test -test.count=1" \
  "$ENVS $RUN -n 3 rma.test -test.count=1" \
  "$ENVS $RUN -n 4 rma.test -test.count=1" \
  "$ENVS $RUN -n 5 rma.test -test.count=1" \
  "$ENVS $RUN -n 2 pingpong oneone -mode fence3,fence2,lock,get -max 12 -reps 12 -warmup 2 -iters 20" \
  "$ENVS $RUN -n 2 -bind-to core pingpong lat -reps 12 -warmup 2" \
  "$ENVS $RUN -n 2 pingpong osu -b put_bw -s flush -m 8:65536 -no-progress"
