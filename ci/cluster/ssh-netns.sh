#!/bin/bash
# ssh-netns.sh [SSH-OPTIONS] HOST COMMAND...: a stand-in for ssh whose hosts
# are the network namespaces of the cluster tests. Both Hydra (mpiexec
# -launcher ssh -launcher-exec THIS) and rmarun (-H ... --launcher-exec THIS)
# start their remote processes through it. It behaves as ssh does where a
# launcher can tell:
#  - HOST is $NET.i or hi (namespace hi); ssh options are skipped;
#  - the words of COMMAND are joined with spaces and run by "sh -c" (Hydra
#    quotes the proxy's path with literal double quotes, as for ssh);
#  - the remote command gets a fresh environment (PATH, HOME, USER, SHELL,
#    SSH_CONNECTION), not the caller's: a launcher passes what it needs;
#  - it runs in a session of its own, so a signal to this process or its
#    group does not reach it;
#  - its standard input, output and error are relayed through this process:
#    when this process dies, the remote side sees end of file on its input
#    and a broken pipe on its output, as when an ssh connection drops;
#  - the exit status is the remote command's (255 if the host is unknown);
#  - with NODE_TMP set (lib.sh), the command sees host hi's node-local
#    directory at $NODE_TMP ($NODE_TMP.d/hi), as a node's own /tmp.
set -u
NET=${NET:-10.77.0}
while [ $# -gt 0 ]; do
	case $1 in
	-[bBcDEeFIiJLlmOopQRSWw]) shift 2 ;; # options with an argument
	--) shift; break ;;
	-*) shift ;;
	*) break ;;
	esac
done
host=${1:?usage: ssh-netns.sh [options] HOST COMMAND...}
shift
case $host in
"$NET".[0-9]*) ns=h${host##*.} ;;
h[0-9]*) ns=$host ;;
*) echo "ssh-netns: $host: unknown host" >&2; exit 255 ;;
esac
[ -e "/run/netns/$ns" ] || { echo "ssh-netns: $host: no namespace $ns" >&2; exit 255; }
[ $# -gt 0 ] || { echo "ssh-netns: no command (no interactive shell here)" >&2; exit 255; }
if [ -n "${SSH_NETNS_LOG:-}" ]; then echo "$(date +%T.%N) $host ($ns): $*" >>"$SSH_NETNS_LOG"; fi

d=$(mktemp -d "${WORK:-/tmp}/tmp/ssh-netns.XXXXXX" 2>/dev/null || mktemp -d /tmp/ssh-netns.XXXXXX)
mkfifo "$d/in" "$d/out" "$d/err"
# The relays die with this script (parent-death signal), closing the pipes.
exec 5<&0
setpriv --pdeathsig KILL cat <&5 >"$d/in" &
inpid=$!
exec 5<&-
setpriv --pdeathsig KILL cat <"$d/out" &
outpid=$!
setpriv --pdeathsig KILL cat <"$d/err" >&2 &
errpid=$!
tmpns=()
if [ -n "${NODE_TMP:-}" ] && [ -d "$NODE_TMP.d/$ns" ]; then
	# shellcheck disable=SC2016 # the inner shell expands them
	tmpns=(unshare --mount --propagation private -- /bin/sh -c 'mount --bind "$1" "$2" && shift 2 && exec "$@"'
		sh "$NODE_TMP.d/$ns" "$NODE_TMP")
fi
setsid "${tmpns[@]}" ip netns exec "$ns" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
	HOME="${HOME:-/root}" USER=root LOGNAME=root SHELL=/bin/sh LANG=C.UTF-8 \
	SSH_CONNECTION="$NET.254 $((20000 + $$ % 40000)) $NET.${ns#h} 22" \
	sh -c "$*" <"$d/in" >"$d/out" 2>"$d/err" &
rpid=$!
wait "$rpid"
rc=$?
kill "$inpid" 2>/dev/null
wait "$outpid" "$errpid" 2>/dev/null
rm -rf "$d"
exit "$rc"
