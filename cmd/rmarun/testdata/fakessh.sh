#!/bin/sh
# Stand-in for ssh in rmarun's tests, run as: fakessh.sh [ssh flags] HOST COMMAND...
# Like ssh it joins COMMAND's words and runs them with a shell, passing
# standard input and output through. It runs them here, or, when
# FAKESSH_NETNS="NET PREFIX" is set, in the network namespace PREFIX<i> that
# stands for host NET.<i>. It appends HOST to $FAKESSH_LOG if that is set,
# and fails like an unreachable host for the host named in $FAKESSH_DOWN.
set -u
while [ $# -gt 0 ]; do
  case "$1" in
    -x|-T|-q|-n) shift ;;
    -o|-p|-l) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
host=${1:?no host}; shift
[ -n "${FAKESSH_LOG:-}" ] && echo "$host" >> "$FAKESSH_LOG"
if [ "$host" = "${FAKESSH_DOWN:-}" ]; then
  echo "ssh: connect to host $host port 22: Connection refused" >&2
  exit 255
fi
if [ -n "${FAKESSH_NETNS:-}" ]; then
  net=${FAKESSH_NETNS% *}; prefix=${FAKESSH_NETNS#* }
  case "$host" in
    "$net".*) exec ip netns exec "$prefix${host##*.}" /bin/sh -c "$*" ;;
    *) echo "fakessh: unknown host $host" >&2; exit 255 ;;
  esac
fi
exec /bin/sh -c "$*"
