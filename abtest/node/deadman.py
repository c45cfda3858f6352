"""Kubelet restarts through a pod (``transport: pod``): a host-side dead-man timer, a restart
detached on the host, verification through the API server only.

A kubelet restart cuts every exec stream, and a kubelet that does not come back cannot be
reached through a pod at all. So before each restart (abtest.node.restart) :func:`arm` starts a
small shell script on the host (:data:`TIMER_SCRIPT`, its values passed as arguments, never
spliced into it) that sleeps ``pod.deadman_s`` and then, unless abtest has disarmed it, puts
the node's kept originals back (``<config>.abtest-original`` and ``<binary>.abtest-original``,
the copies ``abtest node restore`` restores from) and runs the profile's restart command. It
needs nothing from the controller: a controller SIGKILLed in the middle of a restart leaves a
node that comes back by itself. abtest disarms it only after the restarted kubelet is verified
(node Ready with a fresh heartbeat, ``/configz`` and the feature metric, all through the API
server); an exec's exit status is never taken as proof.

The restart itself runs detached (``setsid``) and first leaves the pod's cgroups (its pid
written to the root of every cgroup hierarchy), so the kubelet it starts neither lives in nor
dies with abtest's pod. The journal, backups, markers and the lock stay as they were: after
the timer has fired, ``abtest node restore`` closes the change as on an SSH node.
"""

from __future__ import annotations

import posixpath
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass

from abtest.config.playbook import NodeProfile
from abtest.errors import NodeError
from abtest.node.connection import Connection
from abtest.node.session import NodeSession
from abtest.process.stop import sleep

# Leave the pod's cgroups (v1: every hierarchy's root; v2: the root), so nothing started from
# here is killed with the pod or counted against it. Then run "$@" in a new session, all its
# descriptors away from the exec stream (a descriptor left open would hold the stream).
DETACH = r"""
for procs in /sys/fs/cgroup/cgroup.procs /sys/fs/cgroup/*/cgroup.procs; do
  [ -w "$procs" ] && echo $$ > "$procs" 2>/dev/null
done
log=$1; shift
setsid "$@" < /dev/null >> "$log" 2>&1 &
echo $!
"""

TIMER_SCRIPT = r"""
# abtest's dead-man timer (docs/node-safety.md, "Nodes without SSH")
set -u
delay=$1 disarm=$2 fired=$3 config=$4 binary=$5 restart=$6 status=$7
now() { date +%s; }
end=$(( $(now) + delay ))
while [ "$(now)" -lt "$end" ]; do
  if [ -e "$disarm" ]; then rm -f -- "$disarm"; exit 0; fi
  sleep 1
done
if [ -e "$disarm" ]; then rm -f -- "$disarm"; exit 0; fi
echo "abtest dead-man timer fired at $(date -u +%FT%TZ): not disarmed in ${delay} s"
changed=0
put_back() {
  f=$(readlink -f -- "$1") || f=$1
  [ -f "$f.abtest-original" ] || return 0
  cmp -s -- "$f.abtest-original" "$f" && return 0
  cp -p -- "$f.abtest-original" "$f.abtest-deadman" && sync && mv -f -- "$f.abtest-deadman" "$f"
  sync
  changed=1
  echo "put back $f from $f.abtest-original"
}
put_back "$config"
put_back "$binary"
# a node already put back by other means (`abtest node restore` over SSH) is not restarted
# again, unless the profile's status command says its kubelet is not running
if [ "$changed" = 1 ] || { [ -n "$status" ] && ! sh -c "$status" > /dev/null 2>&1; }; then
  sh -c "$restart"
  echo "restart command exited $?"
else
  echo "nothing to put back and the kubelet runs: no restart"
fi
date +%s > "$fired"
"""


@dataclass(frozen=True)
class Timer:
    """One armed timer on the node: its pid and the files that disarm it or say it fired."""

    pid: int
    disarm: str
    fired: str
    armed_mono: float
    delay_s: float


def work_dir(profile: NodeProfile) -> str:
    """Where the timer's files live: beside the node lock (a directory abtest writes)."""
    return posixpath.dirname(profile.lock_path)


def detach(conn: Connection, log: str, argv: list[str]) -> int:
    """Start ``argv`` on the host, detached and out of the pod's cgroups; its pid."""
    res = conn.run(["sh", "-c", DETACH, "sh", log, *argv], timeout=30)
    res.check(f"starting {argv[0]} detached on the node")
    try:
        return int(res.stdout.split()[-1])
    except (IndexError, ValueError):
        raise NodeError(f"starting {argv[0]} detached printed no pid: {res.stdout!r}") from None


def arm(session: NodeSession) -> Timer:
    """Start the host-side timer for the restart about to happen."""
    profile = session.profile
    assert profile.pod is not None
    base = posixpath.join(work_dir(profile), f"abtest-deadman.{secrets.token_hex(4)}")
    delay = profile.pod.deadman_s
    argv = [
        "sh",
        "-c",
        TIMER_SCRIPT,
        "abtest-deadman",
        str(int(delay)),
        base + ".disarm",
        base + ".fired",
        profile.kubelet_config_path,
        profile.kubelet_binary_path,
        profile.restart_command,
        profile.status_command or "",
    ]
    pid = detach(session.ssh, base + ".log", argv)
    return Timer(pid, base + ".disarm", base + ".fired", time.monotonic(), delay)


# The disarm file first (a timer between two of its checks sees it), then the timer is
# stopped and, once it is gone, its files go, and those of timers that fired before (their
# node has just been verified healthy under a new restart).
DISARM = r"""
touch -- "$1"
kill "$2" 2>/dev/null
i=0
while [ $i -lt 50 ] && grep -q abtest-deadman "/proc/$2/cmdline" 2>/dev/null; do
  sleep 0.1; i=$((i+1))
done
if grep -q abtest-deadman "/proc/$2/cmdline" 2>/dev/null; then
  echo "the timer (pid $2) is still running" >&2; exit 1
fi
rm -f -- "$1" "$3"
for fired in "$4"/abtest-deadman.*.fired; do
  [ -e "$fired" ] && rm -f -- "$fired" "${fired%.fired}.log"
done
exit 0
"""


def disarm(session: NodeSession, timer: Timer) -> None:
    """The restart is verified: the timer ends without touching anything."""
    base = timer.disarm.removesuffix(".disarm")
    argv = ["sh", "-c", DISARM, "sh", timer.disarm, str(timer.pid), base + ".log"]
    res = session.ssh.run([*argv, posixpath.dirname(base)], timeout=30)
    res.check("disarming the dead-man timer")


#: the detached restart waits this long, so the exec that starts it has returned before the
#: kubelet (which carries that exec's stream) stops; restart times through a pod include it
RESTART_DELAY_S = 1


def restart_detached(session: NodeSession, progress: Callable[[str], None]) -> None:
    """The profile's restart command, on the host, outliving the exec that starts it. A
    stream the restart cut anyway is no failure: only the API server's view decides."""
    profile = session.profile
    log = posixpath.join(work_dir(profile), "abtest-restart.log")
    script = f'sleep {RESTART_DELAY_S}; exec sh -c "$1"'
    try:
        detach(session.ssh, log, ["sh", "-c", script, "abtest-restart", profile.restart_command])
    except NodeError as exc:
        progress(f"the exec that started the restart ended early ({exc}); verifying")


def wait_for_timer(session: NodeSession, timer: Timer, timeout: float) -> bool:
    """Wait until the timer has fired and the node answers through its pod again (the
    rollback that follows needs it); False when that did not happen in time."""
    deadline = timer.armed_mono + timer.delay_s + timeout
    while time.monotonic() < deadline:
        try:
            if session.ssh.run(["test", "-e", timer.fired], timeout=15).ok:
                return True
        except NodeError:
            pass  # no kubelet, no exec: the timer has not brought it back yet
        sleep(1.0)
    return False
