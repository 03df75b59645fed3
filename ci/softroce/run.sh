#!/bin/bash
# run.sh: run commands inside a throwaway Soft-RoCE (rdma_rxe) VM.
#
# Boots the stock Debian kernel under QEMU TCG with a busybox initramfs,
# creates rxe0 on dummy0 (192.0.2.1/24), runs the given commands in order,
# prints each one's output between markers and exits non-zero if any command
# failed or the VM did not reach the end.
#
# Usage:
#   ci/softroce/run.sh [options] [--] [COMMAND ...]
#
# Options:
#   --bin FILE        copy FILE and its shared libraries into the VM as
#                     /rmago/bin/<basename> (on PATH); repeatable
#   --file SRC[:DST]  copy SRC to DST (default /rmago/<basename>); repeatable
#   --cmds FILE       read commands from FILE, one per line ('#' comments and
#                     blank lines skipped); added before the COMMAND arguments
#   --perftest        also run ib_write_lat, ib_read_lat, ib_atomic_lat and
#                     ib_write_bw (server and client in the VM) and report
#                     t_typical and BW average
#   --timeout SECS    wall-clock limit for the whole VM (default 1200)
#   --cmd-timeout S   limit per command inside the VM (default 900)
#   --log FILE        keep the full console log there (default
#                     $RMAGO_VM_DIR/last-run.log)
#   -v, --verbose     stream the console while the VM runs
#   --setup-only      install packages, fetch the kernel, build the base image
#
# Each command runs with `sh` in /root as root, PATH starting with
# /rmago/bin, and these variables set: RMAGO_VM=1, RMAGO_VM_IP=192.0.2.1,
# RMAGO_GID_INDEX=<RoCE v2 GID index of that address on rxe0>.
#
# Environment: RMAGO_VM_DIR (cache and work dir, default /tmp/rmago-vm),
# RMAGO_VM_KERNEL (kernel version override), RMAGO_VM_MEM (MiB, default
# 2048), RMAGO_VM_SMP (default 2), RMAGO_VM_OPTS (extra QEMU arguments).
#
# Exit status: 0 all commands passed, 1 some command failed, 2 the VM or the
# setup failed (no summary line, timeout, kernel panic).
set -euo pipefail
SOFTROCE_SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=common.sh
. "$SOFTROCE_SRC/common.sh"

usage() {
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
	exit "${1:-0}"
}

BINS=()
FILES=()
CMDS=()
PERF=0
VM_TIMEOUT=1200
CMD_TIMEOUT=900
LOG=
VERBOSE=0
SETUP_ONLY=0
while [ $# -gt 0 ]; do
	case $1 in
	--bin) BINS+=("$2"); shift 2 ;;
	--file) FILES+=("$2"); shift 2 ;;
	--cmds)
		[ -f "$2" ] || die "no commands file $2"
		while IFS= read -r line || [ -n "$line" ]; do
			case $line in '' | '#'*) continue ;; esac
			CMDS+=("$line")
		done <"$2"
		shift 2
		;;
	--perftest) PERF=1; shift ;;
	--timeout) VM_TIMEOUT=$2; shift 2 ;;
	--cmd-timeout) CMD_TIMEOUT=$2; shift 2 ;;
	--log) LOG=$2; shift 2 ;;
	-v | --verbose) VERBOSE=1; shift ;;
	--setup-only) SETUP_ONLY=1; shift ;;
	-h | --help) usage 0 ;;
	--) shift; CMDS+=("$@"); break ;;
	-*) echo "unknown option $1" >&2; usage 2 ;;
	*) CMDS+=("$1"); shift ;;
	esac
done
if [ $PERF -eq 1 ]; then
	for s in 2 64 4096; do CMDS+=("perfpair ib_write_lat -s $s -n 1000"); done
	for s in 2 64 4096; do CMDS+=("perfpair ib_read_lat -s $s -n 1000"); done
	CMDS+=("perfpair ib_atomic_lat -n 1000")
	CMDS+=("perfpair ib_atomic_lat -A CMP_AND_SWAP -n 1000")
	for s in 8 4096 65536; do CMDS+=("perfpair ib_write_bw -s $s -n 2000"); done
fi
[ ${#CMDS[@]} -gt 0 ] || [ $SETUP_ONLY -eq 1 ] || die "no commands to run (see --help)"

mkdir -p "$RMAGO_VM_DIR"
T0=$(date +%s.%N)
# Serialise the cached setup between concurrent runs.
exec 9>"$RMAGO_VM_DIR/.lock"
flock 9
ensure_packages
KV=$(kernel_version)
ensure_kernel "$KV"
build_base "$KV"
flock -u 9
[ $SETUP_ONLY -eq 1 ] && {
	log "setup done: kernel $KV, $BASE_CPIO"
	exit 0
}

# Per-run overlay: binaries, files, commands, config. The kernel unpacks the
# concatenated cpio archives in order, so the overlay adds to the base.
mkdir -p "$RMAGO_VM_DIR/runs"
RUN=$(mktemp -d "$RMAGO_VM_DIR/runs/run.XXXXXX")
trap 'rm -rf "$RUN"' EXIT
O=$RUN/root
mkdir -p "$O/rmago/bin" "$O/rmago/cmd"
declare -A inbase=()
while IFS= read -r p; do [ -n "$p" ] && inbase[$p]=1; done <"$BASE_CPIO.list"
add_with_deps() { # SRC DEST: copy SRC and the libraries the base lacks
	local src=$1 dest=$2 lib in
	[ -f "$src" ] || die "no such file: $src"
	mkdir -p "$O$(dirname "$dest")"
	cp -L "$src" "$O$dest"
	chmod a+rx "$O$dest"
	while read -r in; do
		# /lib, /lib64 and /bin are symlinks into /usr in the image
		case $in in /lib/* | /lib64/* | /bin/*) lib=/usr$in ;; *) lib=$in ;; esac
		[ -n "${inbase[$lib]:-}" ] || [ -e "$O$lib" ] && continue
		mkdir -p "$O$(dirname "$lib")"
		cp -L "$in" "$O$lib"
	done < <(ldd "$src" 2>/dev/null | grep -o '/[^ ]*' || true)
}
for b in "${BINS[@]}"; do add_with_deps "$b" "/rmago/bin/$(basename "$b")"; done
for f in "${FILES[@]}"; do
	src=${f%%:*}
	dst=/rmago/$(basename "$src")
	[ "$src" != "$f" ] && dst=${f#*:}
	[ -e "$src" ] || die "no such file: $src"
	mkdir -p "$O$(dirname "$dst")"
	cp -rL "$src" "$O$dst"
done
i=0
for c in "${CMDS[@]}"; do
	i=$((i + 1))
	printf '%s\n' "$c" >"$O/rmago/cmd/$(printf %03d $i)"
done
NCMDS=$i
printf 'CMD_TIMEOUT=%s\n' "$CMD_TIMEOUT" >"$O/rmago/config"
(cd "$O" && find . -mindepth 1 | LC_ALL=C sort | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$RUN/overlay.cpio.gz"
cat "$BASE_CPIO" "$RUN/overlay.cpio.gz" >"$RUN/initrd.gz"

LOG=${LOG:-$RMAGO_VM_DIR/last-run.log}
mkdir -p "$(dirname "$LOG")"
log "booting $KV under QEMU TCG: $NCMDS command(s), log $LOG"
T1=$(date +%s.%N)
set +e
# shellcheck disable=SC2086
QEMU=(timeout -k 10 "$VM_TIMEOUT" qemu-system-x86_64 -accel tcg -cpu max
	-m "${RMAGO_VM_MEM:-2048}" -smp "${RMAGO_VM_SMP:-2}" -nographic -no-reboot -nic none
	-kernel "$VMLINUZ" -initrd "$RUN/initrd.gz"
	-append "console=ttyS0 panic=-1 loglevel=3 rdinit=/init"
	${RMAGO_VM_OPTS:-})
if [ $VERBOSE -eq 1 ]; then
	"${QEMU[@]}" </dev/null 2>&1 | tr -d '\r' | tee "$LOG"
	QRC=${PIPESTATUS[0]}
else
	"${QEMU[@]}" </dev/null 2>&1 | tr -d '\r' >"$LOG"
	QRC=${PIPESTATUS[0]}
fi
set -e
T2=$(date +%s.%N)

# ---- parse the console log
echo "---- softroce VM results ($KV) ----"
if [ $VERBOSE -eq 0 ]; then
	# Show each command's output, framed, and anything after a failure.
	sed -n '/^=== RMAGO-CMD [0-9]* BEGIN/,/^=== RMAGO-CMD [0-9]* END/p; /^=== RMAGO-SETUP-FAILED/,$p' "$LOG"
fi
if grep -aq '^RMAGO-PERF ' "$LOG"; then
	echo "---- perftest (latency: t_typical, usec; bandwidth: BW average, MB/s of 2^20 bytes) ----"
	sed -n "s/^RMAGO-PERF tool=\([^ ]*\) args='\(.*\)' bytes=\([0-9]*\) t_typical_usec=\(.*\)/\1 \2: \4/p; s/^RMAGO-PERF tool=\([^ ]*\) args='\(.*\)' bytes=\([0-9]*\) bw_avg_mbps=\(.*\)/\1 \2: \4 MB\/s/p" "$LOG"
fi
ready=$(sed -n 's/^=== RMAGO-READY uptime=\([0-9.]*\).*/\1/p' "$LOG" | head -1)
summary=$(grep -a '^=== RMAGO-SUMMARY ' "$LOG" | tail -1 || true)
ends=$(grep -ac '^=== RMAGO-CMD [0-9]* END rc=' "$LOG" || true)
fails=$(grep -a '^=== RMAGO-CMD [0-9]* END rc=' "$LOG" | grep -vc ' rc=0 ' || true)
printf 'timing: setup %.1fs, VM %.1fs (kernel boot to rxe0 ready %ss), total %.1fs; qemu exit %s\n' \
	"$(echo "$T1 - $T0" | bc)" "$(echo "$T2 - $T1" | bc)" "${ready:-?}" "$(echo "$T2 - $T0" | bc)" "$QRC"
if [ -z "$summary" ]; then
	echo "FAIL: the VM did not reach the end (no summary line; qemu exit $QRC, timeout ${VM_TIMEOUT}s). Last lines:"
	tail -40 "$LOG"
	exit 2
fi
echo "${summary#=== RMAGO-}"
if [ "$ends" -ne "$NCMDS" ]; then
	echo "FAIL: $ends of $NCMDS commands completed"
	exit 2
fi
if [ "$fails" -ne 0 ]; then
	echo "FAIL: $fails command(s) failed:"
	grep -a '^=== RMAGO-CMD [0-9]* \(BEGIN\|END\)' "$LOG" | grep -B1 'END rc=[1-9]' | grep BEGIN
	# Repeat each failed command's failing lines and its last lines here, at
	# the end, where a CI log cut to its tail still shows them.
	for n in $(sed -n 's/^=== RMAGO-CMD \([0-9]*\) END rc=[1-9].*/\1/p' "$LOG"); do
		block=$(sed -n "/^=== RMAGO-CMD $n BEGIN/,/^=== RMAGO-CMD $n END/p" "$LOG")
		echo "---- command $n: its failing lines ----"
		grep -a -E -e '--- FAIL|^FAIL|panic:|fatal error|timed out|[Ee]rror' <<<"$block" | head -40 || true
		echo "---- command $n: its last lines ----"
		tail -25 <<<"$block"
	done
	exit 1
fi
echo "PASS: all $NCMDS command(s) passed"
