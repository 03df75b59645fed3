#!/bin/sh
# perfpair TOOL [ARGS...]: runs a perftest latency tool (ib_write_lat,
# ib_read_lat, ib_atomic_lat, ib_send_lat) or bandwidth tool (ib_write_bw,
# ib_read_bw) as server and client in this VM over rxe0 and prints
#
#   RMAGO-PERF tool=<TOOL> args='<ARGS>' bytes=<n> t_typical_usec=<t>
#   RMAGO-PERF tool=<TOOL> args='<ARGS>' bytes=<n> bw_avg_mbps=<MB/s>
#
# Use t_typical: under QEMU TCG, t_avg has timer-tick stalls. The bandwidth
# tools report "BW average[MB/sec]" (perftest's MB: 2^20 bytes). Exits
# non-zero when either side fails. Installed as /rmago/bin/perfpair in the
# VM.
tool=$1
shift
args="$*"
dev=${RMAGO_PERF_DEVICE:-rxe0}
gidx=${RMAGO_GID_INDEX:-1}
ip=${RMAGO_VM_IP:-192.0.2.1}
cnt=/tmp/.perfpair-port
port=$(($(cat $cnt 2>/dev/null || echo 18515) + 1))
echo $port >$cnt

timeout 300 "$tool" -d "$dev" -x "$gidx" -p "$port" "$@" >/tmp/perf-srv.log 2>&1 &
spid=$!
try=0
while :; do
	sleep 1
	timeout 240 "$tool" -d "$dev" -x "$gidx" -p "$port" "$@" "$ip" >/tmp/perf-cli.log 2>&1
	crc=$?
	# The server may not be listening yet under a slow emulator: retry.
	if [ $crc -ne 0 ] && grep -q "Couldn't connect" /tmp/perf-cli.log && [ $try -lt 5 ] &&
		kill -0 $spid 2>/dev/null; then
		try=$((try + 1))
		continue
	fi
	break
done
wait $spid
src=$?
cat /tmp/perf-cli.log
if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
	echo "perfpair: client rc=$crc server rc=$src; server log:"
	sed 's/^/  [server] /' /tmp/perf-srv.log
	exit 1
fi
case $tool in
*_bw)
	# #bytes #iterations BW-peak BW-average MsgRate
	line=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF == 5 {print $1, $4; exit}' /tmp/perf-cli.log)
	metric=bw_avg_mbps
	;;
*)
	line=$(awk '$1 ~ /^[0-9]+$/ && $2 ~ /^[0-9]+$/ && NF >= 6 {print $1, $5; exit}' /tmp/perf-cli.log)
	metric=t_typical_usec
	;;
esac
[ -n "$line" ] || {
	echo "perfpair: no result line"
	exit 1
}
echo "RMAGO-PERF tool=$tool args='$args' bytes=${line% *} $metric=${line#* }"
