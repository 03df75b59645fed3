#!/bin/sh
# dev-join-shim.sh PROGRAM [ARGS...]: for developing the harness only
# (cases.sh with DEV_JOIN_SHIM=1), before rma.Init speaks PMI: it turns the
# rank and size a PMI launcher gives (PMI_RANK, PMI_SIZE) into rmarun's
# contract (RMAGO_*), with rank 0's rendezvous on the first host and the
# fabric on this host's eth0, then runs PROGRAM. The real cases run the
# programs directly.
ip=$(ip -4 -o addr show dev eth0 | awk '{split($4, a, "/"); print a[1]}')
export RMAGO_RANK="${PMI_RANK:?no PMI_RANK}" RMAGO_SIZE="${PMI_SIZE:?no PMI_SIZE}"
export RMAGO_RENDEZVOUS="${NET:-10.77.0}.1:${DEV_JOIN_PORT:-17000}" RMAGO_ADDR="$ip"
export RMAGO_SECRET=00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff
unset PMI_FD PMI_PORT PMI_ID
exec "$@"
