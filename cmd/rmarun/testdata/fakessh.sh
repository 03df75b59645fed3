#!/bin/sh
# Stand-in for ssh in rmarun's tests, run as: fakessh.sh [ssh flags] HOST COMMAND...
# Like ssh it joins COMMAND's words and runs them with a shell, passing
# standard input and output through, in a fresh environment like a login's
# (PATH, HOME, and FAKESSH_HOST=HOST). It runs them here, or, when
# FAKESSH_NETNS="NET PREFIX" is set, in the network namespace PREFIX<i> that
# stands for host NET.<i>. It appends HOST to $FAKESSH_LOG if that is set,
# and fails like an unreachable host for the host named in $FAKESSH_DOWN,
# or hangs like one that never answers for the host in $FAKESSH_HANG.
# With FAKESSH_NOEXEC=1 the shell is its child rather than replacing it, so
# that killing the stand-in leaves the remote side running, as killing ssh
# does.
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
if [ "$host" = "${FAKESSH_HANG:-}" ]; then
  exec sleep 3601
fi
set -- env -i PATH="$PATH" HOME="${HOME:-/}" GORACE="${GORACE:-}" FAKESSH_HOST="$host" /bin/sh -c "$*"
if [ -n "${FAKESSH_NETNS:-}" ]; then
  net=${FAKESSH_NETNS% *}; prefix=${FAKESSH_NETNS#* }
  case "$host" in
    "$net".*) set -- ip netns exec "$prefix${host##*.}" "$@" ;;
    *) echo "fakessh: unknown host $host" >&2; exit 255 ;;
  esac
fi
if [ -n "${FAKESSH_NOEXEC:-}" ]; then
  "$@"
  exit $?
fi
exec "$@"
