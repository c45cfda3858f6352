"""The lab kubelet's service script (``bin/kubelet-service``): what `systemctl` is to a real
node's kubelet, for the profile's restart and status commands."""

from __future__ import annotations

from abtest.lab.layout import Node

# Fixed in the kubelet (the device plugin API's registration socket), not under --root-dir:
# every kubelet of the lab binds this one path.
DEVICE_PLUGIN_SOCKET = "/var/lib/kubelet/device-plugins/kubelet.sock"


def script(node: Node) -> str:
    return KUBELET_SERVICE.format(
        pidfile=node.pids / "kubelet.pid",
        log=node.logs / "kubelet.log",
        flags=node.kubelet_dir / "flags",
        binary=node.bin / "kubelet",
        start_lock=node.paths.run / "kubelet-start.lock",
        socket=DEVICE_PLUGIN_SOCKET,
    )


KUBELET_SERVICE = """#!/bin/sh
# Supervises the lab kubelet the way `systemctl restart kubelet` would on a real node:
# stop the running kubelet, start it again with the same flags, append its logs.
set -eu
PIDFILE={pidfile}
LOG={log}
FLAGS={flags}
BIN={binary}
START_LOCK={start_lock}
SOCKET={socket}
running() {{
  [ -f "$PIDFILE" ] || return 1
  pid=$(cat "$PIDFILE")
  [ -r "/proc/$pid/cmdline" ] && tr '\\0' ' ' < "/proc/$pid/cmdline" | grep -q kubelet
}}
# A zombie has exited (whoever adopted it may not reap it soon): not present.
present() {{
  [ -d "/proc/$1" ] && ! grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null
}}
stop() {{
  if running; then
    kill -TERM "$pid"
    i=0
    while present "$pid" && [ $i -lt 150 ]; do sleep 0.1; i=$((i+1)); done
    if present "$pid"; then
      kill -KILL "$pid" 2>/dev/null || true
      # SIGKILL is not instant (a process in uninterruptible sleep): wait, but not forever.
      i=0
      while present "$pid" && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
      if present "$pid"; then
        echo "kubelet-service: kubelet pid $pid still present 10 s after SIGKILL" >&2
        exit 1
      fi
    fi
  fi
  rm -f "$PIDFILE"
}}
# Whether kubelet $1 listens on the device-plugin socket (the socket's inode among its fds).
bound() {{
  for ino in $(awk -v p="$SOCKET" '$8 == p {{ print $7 }}' "/proc/$1/net/unix" 2>/dev/null); do
    ls -l "/proc/$1/fd" 2>/dev/null | grep -q "socket:\\[$ino\\]" && return 0
  done
  return 1
}}
start() {{
  echo "--- kubelet-service: start at $(date -u +%FT%TZ)" >> "$LOG"
  # Every lab kubelet binds the same device-plugin socket: the kubelet fixes its path, not
  # under --root-dir. Two starting at once race for it and one exits ("bind: address already
  # in use"), so starts go one at a time: the lock is held until this kubelet listens on it,
  # has exited, or 30 s have passed.
  exec 9>>"$START_LOCK"
  flock 9
  # The kubelet keeps no descriptor of whoever restarted it: a caller's lock (flock) would
  # otherwise stay held for as long as this kubelet runs.
  # shellcheck disable=SC2046
  setsid "$BIN" $(cat "$FLAGS") < /dev/null >> "$LOG" 2>&1 3>&- 4>&- 5>&- 6>&- 7>&- 8>&- 9>&- &
  kubelet=$!
  echo "$kubelet" > "$PIDFILE"
  i=0
  while [ $i -lt 300 ] && present "$kubelet" && ! bound "$kubelet"; do sleep 0.1; i=$((i+1)); done
  exec 9>&-
}}
case "${{1:-}}" in
  start) running || start ;;
  stop) stop ;;
  restart) stop; start ;;
  status) if running; then echo "running $pid"; else echo stopped; exit 3; fi ;;
  *) echo "usage: $0 start|stop|restart|status" >&2; exit 2 ;;
esac
"""
