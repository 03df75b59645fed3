#!/bin/bash
# test-ibv.sh: build the verbs/ibv tests with -tags ibv and run them in the
# Soft-RoCE VM (see run.sh). Extra arguments go to run.sh, e.g. --perftest
# or -v. Set TESTFLAGS to pass flags to the test binary (default -test.v).
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
RMAGO_VM_DIR=${RMAGO_VM_DIR:-/tmp/rmago-vm}
mkdir -p "$RMAGO_VM_DIR/bin"
BIN=$RMAGO_VM_DIR/bin/ibv.test
(cd "$ROOT" && CGO_ENABLED=1 go test -c -tags ibv -o "$BIN" ./verbs/ibv)
exec "$HERE/run.sh" --bin "$BIN" "$@" -- "ibv.test -test.count=1 ${TESTFLAGS:--test.v}"
