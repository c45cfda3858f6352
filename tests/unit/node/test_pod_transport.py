"""transport: pod against fakes: the profile's checks, PodConnection's Connection contract over
a fake exec (the command run on this machine, as the real exec runs it in the host's
namespaces), the exec stream's frames and status, the pod's lifecycle, and the host-side
dead-man timer script run for real with ``sh`` on files in ``tmp_path``."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from abtest.cluster import node_pods
from abtest.cluster.node_pods import ExecCut, ExecOutcome, ExecTimeout, PodSpec
from abtest.config.playbook import load_profile
from abtest.errors import ClusterError, ConfigError, NodeError, UserError
from abtest.node import deadman, health, pod_transport, restart
from abtest.node.connection import Connection
from abtest.node.pod_transport import NSENTER, PodConnection, controller_id

LAB = Path(__file__).resolve().parents[3] / "playbooks" / "nodes" / "lab.yaml"
POD = "transport: pod\npod:\n  image: busybox:1.36.1\n"
HEAD = "node_name: n\nkubelet: {config_path: /a, binary_path: /b}\n"

# --------------------------------------------------------------------------- the profile

BAD = {
    "unknown transport": ("transport: telnet\nssh: {host: h}\n", "transport: unknown transport"),
    "no image": ("transport: pod\npod: {namespace: abtest}\n", "pod.image: missing required key"),
    "shell in image": (
        "transport: pod\npod: {image: 'busybox; rm -rf /'}\n",
        "pod.image: invalid image reference",
    ),
    "substitution in image": (
        "transport: pod\npod: {image: 'x$(id)'}\n",
        "pod.image: invalid image reference",
    ),
    "ssh with pod": (
        "transport: pod\nssh: {host: h}\npod: {image: busybox}\n",
        "ssh: given with transport: pod",
    ),
    "pod without section": ("transport: pod\n", "pod: transport: pod needs a pod section"),
    "pod section on ssh": ("ssh: {host: h}\npod: {image: busybox}\n", "pod: given with"),
    "bad namespace": (
        "transport: pod\npod: {image: busybox, namespace: Bad_NS}\n",
        "pod.namespace: invalid namespace",
    ),
    "short timer": (
        "transport: pod\nhealth_timeout_s: 60\npod: {image: busybox, deadman_s: 30}\n",
        "pod.deadman_s: 30 s is not longer than health_timeout_s",
    ),
    "unknown pod key": ("transport: pod\npod: {image: busybox, hostile: 1}\n", "unknown key"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_pod_profile_is_one_line(tmp_path: Path, case: str) -> None:
    text, message = BAD[case]
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + text)
    with pytest.raises(ConfigError) as err:
        load_profile(str(path))
    line = err.value.one_line()
    assert message in line and "\n" not in line


def test_a_pod_profile_loads_without_ssh(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(HEAD + POD + "health_timeout_s: 30\n")
    prof = load_profile(str(path))
    assert prof.transport == "pod" and prof.ssh is None
    assert prof.pod is not None and prof.pod.image == "busybox:1.36.1"
    assert prof.pod.namespace == "abtest-node" and prof.pod.deadman_s == 90.0  # health + 60
    assert "a pod (busybox:1.36.1" in prof.reached_by
    assert load_profile(str(LAB)).transport == "ssh"
    assert load_profile(str(LAB)).reached_by == "SSH (abtest-lab)"


# --------------------------------------------------------------------------- fake API


class FakeAPI:
    """The node-access pod's API calls: pods kept in a dict, exec run on this machine."""

    def __init__(self, nodes: tuple[str, ...] = ("n",), phase: str = "Running") -> None:
        self.nodes = nodes
        self.phase = phase
        self.pods: dict[str, dict[str, Any]] = {}
        self.deleted: list[str] = []
        self.execs: list[list[str]] = []

    def install(self, monkeypatch: pytest.MonkeyPatch) -> None:
        m = pod_transport
        monkeypatch.setattr(m, "node_names", lambda cluster: list(self.nodes))
        monkeypatch.setattr(m, "ensure_namespace", lambda cluster, ns: False)
        monkeypatch.setattr(m, "create_pod", self.create)
        monkeypatch.setattr(m, "read_pod", lambda c, ns, name: self.pods.get(name))
        monkeypatch.setattr(m, "delete_pod", self.delete)
        monkeypatch.setattr(m, "node_access_pods", lambda c, ns, node: list(self.pods.values()))
        monkeypatch.setattr(m, "exec_in_pod", self.exec)

    def create(self, cluster: Any, spec: PodSpec) -> None:
        body = node_pods.node_pod_body(spec)
        body["status"] = {
            "phase": self.phase,
            "conditions": [
                {"type": "PodScheduled", "status": "False", "message": "0/1 nodes are available"}
            ],
        }
        self.pods[spec.name] = body

    def delete(self, cluster: Any, ns: str, name: str) -> None:
        assert node_pods.owned(self.pods[name])
        self.deleted.append(name)
        del self.pods[name]

    def exec(
        self,
        cluster: Any,
        ns: str,
        pod: str,
        argv: list[str],
        *,
        stdin: bytes | None,
        timeout: float,
    ) -> ExecOutcome:
        assert pod in self.pods and argv[: len(NSENTER)] == NSENTER
        self.execs.append(argv)
        try:
            proc = subprocess.run(
                argv[len(NSENTER) :], input=stdin or b"", capture_output=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            raise ExecTimeout(f"timed out after {timeout:.0f} s") from None
        return ExecOutcome(proc.returncode, proc.stdout, proc.stderr)


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeAPI:
    fake = FakeAPI()
    fake.install(monkeypatch)
    return fake


def _conn(ready_s: float = 60.0, node: str = "n") -> PodConnection:
    from abtest.config.pod_transport import PodTarget

    target = PodTarget(image="busybox:1.36.1", ready_timeout_s=ready_s)
    cluster: Any = object()  # never called: the fake API stands in for every call
    return PodConnection(
        node, target, kubeconfig=None, context=None, source="p.yaml", cluster=cluster
    )


def test_the_pod_connection_keeps_the_connection_contract(api: FakeAPI, tmp_path: Path) -> None:
    conn: Connection = _conn()
    assert not conn.connected
    res = conn.run(["sh", "-c", "echo out; echo err >&2; exit 3"], sudo=True)
    assert conn.connected and len(api.pods) == 1
    assert (res.rc, res.stdout, res.stderr) == (3, "out\n", "err\n")
    assert conn.run(["cat"], stdin=b"a\x00\xff").stdout_bytes == b"a\x00\xff"
    assert conn.run_shell('printf %s "$0" | wc -c').stdout.strip() == "2"  # sh -c, $0=sh
    assert conn.run(["printf", "%s", "a b;$(id)"]).stdout == "a b;$(id)"  # argv, never a shell
    path = str(tmp_path / "f")
    conn.write_bytes(path, b"\x01" * 3_000_000, mode=0o640)
    st = conn.stat(path)
    assert st is not None and (st.size, st.mode, st.uid) == (3_000_000, 0o640, os.getuid())
    assert conn.read_bytes(path) == b"\x01" * 3_000_000
    assert conn.stat(str(tmp_path / "absent")) is None
    with pytest.raises(NodeError, match="no such file"):
        conn.read_bytes(str(tmp_path / "absent"))
    with pytest.raises(ValueError):
        conn.run(["echo", "a\x00b"])
    assert conn.endpoint.alias == "n" and "on node n" in conn.endpoint.describe()
    conn.close()
    assert api.pods == {} and len(api.deleted) == 1 and not conn.connected


def test_a_command_past_its_time_is_a_node_error(api: FakeAPI) -> None:
    conn = _conn()
    t0 = time.monotonic()
    with pytest.raises(NodeError, match="timed out after 1 s"):
        conn.run(["sleep", "5"], timeout=1)
    assert time.monotonic() - t0 < 4
    conn.close()


def test_a_pod_that_does_not_run_is_one_line_and_deleted(monkeypatch: pytest.MonkeyPatch) -> None:
    api = FakeAPI(phase="Pending")
    api.install(monkeypatch)
    conn = _conn(ready_s=1.0)
    with pytest.raises(UserError) as err:
        conn.run(["true"])
    line = err.value.one_line()
    assert "did not run within 1 s" in line and "0/1 nodes are available" in line
    assert "nothing on the node was touched" in line
    assert api.pods == {} and len(api.deleted) == 1 and api.execs == []


def test_a_node_that_does_not_exist_creates_no_pod(api: FakeAPI) -> None:
    conn = _conn(node="ghost")
    with pytest.raises(UserError, match="node ghost does not exist"):
        conn.run(["true"])
    assert api.pods == {} and api.execs == []


def test_a_killed_controllers_pod_is_deleted_and_a_live_ones_kept(api: FakeAPI) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    host = controller_id().split()[0]
    for name, who in (
        ("old", f"{host} {dead.pid} 1"),
        ("live", controller_id()),
        ("elsewhere", "other-host 1 1"),
    ):
        api.create(None, PodSpec(name, "abtest", "n", "busybox", "Never", who))
    conn = _conn()
    conn.run(["true"])
    assert "old" in api.deleted and {"live", "elsewhere"} <= set(api.pods)
    conn.close()


def test_the_pod_spec_is_pinned_privileged_and_labelled_as_ours() -> None:
    body = node_pods.node_pod_body(PodSpec("p", "abtest", "n1", "img", "Never", "h 1 2"))
    spec = body["spec"]
    assert spec["nodeName"] == "n1" and spec["hostPID"] and spec["hostNetwork"]
    assert spec["tolerations"] == [{"operator": "Exists"}]
    assert spec["containers"][0]["securityContext"] == {"privileged": True}
    assert spec["volumes"][0]["hostPath"]["path"] == "/"
    assert node_pods.owned(body)
    body["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "someone"
    assert not node_pods.owned(body)


# --------------------------------------------------------------------------- the exec stream


class FakeWS:
    """A WSClient: records stdin frames, answers with scripted channel data."""

    def __init__(self, frames: list[tuple[int, bytes]], hang: bool = False) -> None:
        self.frames = frames
        self.hang = hang
        self.stdin: list[bytes] = []
        self.closed_stdin = False
        self.buf: dict[int, bytes] = {}
        self.closed = False

    def write_channel(self, channel: int, data: bytes) -> None:
        assert channel == 0 and isinstance(data, bytes) and not self.closed_stdin
        self.stdin.append(data)

    def close_channel(self, channel: int) -> None:
        self.closed_stdin = True

    def is_open(self) -> bool:
        return self.hang or bool(self.frames)

    def update(self, timeout: float = 0) -> None:
        if self.frames and self.closed_stdin:
            ch, data = self.frames.pop(0)
            self.buf[ch] = self.buf.get(ch, b"") + data
        elif self.hang:
            time.sleep(min(timeout, 0.05))

    def _take(self, ch: int) -> bytes:
        return self.buf.pop(ch, b"")

    def read_stdout(self, timeout: float = 0) -> bytes:
        return self._take(1)

    def read_stderr(self, timeout: float = 0) -> bytes:
        return self._take(2)

    def read_channel(self, ch: int) -> bytes:
        return self._take(ch)

    def close(self) -> None:
        self.closed = True


FAILED_1 = json.dumps(
    {
        "status": "Failure",
        "reason": "NonZeroExitCode",
        "details": {"causes": [{"reason": "ExitCode", "message": "1"}]},
    }
).encode()


def _exec(
    monkeypatch: pytest.MonkeyPatch, ws: FakeWS, stdin: bytes | None = None, timeout: float = 5
) -> ExecOutcome:
    monkeypatch.setattr(node_pods, "open_exec", lambda *a: ws)
    return node_pods.exec_in_pod(object(), "ns", "p", ["x"], stdin=stdin, timeout=timeout)  # type: ignore[arg-type]


def test_exec_streams_stdin_in_frames_then_closes_it(monkeypatch: pytest.MonkeyPatch) -> None:
    data = os.urandom(node_pods.STDIN_CHUNK * 2 + 5)
    ws = FakeWS([(1, b"o1"), (2, b"e"), (1, b"o2"), (3, b'{"status":"Success"}')])
    out = _exec(monkeypatch, ws, stdin=data)
    assert b"".join(ws.stdin) == data and len(ws.stdin) == 3 and ws.closed_stdin
    assert (out.rc, out.stdout, out.stderr) == (0, b"o1o2", b"e") and ws.closed


def test_exec_status_codes_and_failures(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _exec(monkeypatch, FakeWS([(3, FAILED_1)])).rc == 1
    bad = json.dumps({"status": "Failure", "message": "exec: nsenter: not found"}).encode()
    with pytest.raises(ClusterError, match="nsenter: not found"):
        _exec(monkeypatch, FakeWS([(3, bad)]))
    with pytest.raises(ExecCut, match="without an exit status"):
        _exec(monkeypatch, FakeWS([(1, b"half")]))  # a kubelet restart cut the stream
    ws = FakeWS([], hang=True)
    with pytest.raises(ExecTimeout):
        _exec(monkeypatch, ws, timeout=0.3)
    assert ws.closed


# --------------------------------------------------------------------------- dead-man timer


def _timer(
    tmp_path: Path, delay: int, ours: str = "ours\n", status: str = ""
) -> tuple[subprocess.Popen[bytes], Path, Path, Path]:
    config, binary = tmp_path / "config.yaml", tmp_path / "kubelet"
    config.write_text(ours)
    (tmp_path / "config.yaml.abtest-original").write_text("original\n")
    binary.write_bytes(b"candidate" if ours != "original\n" else b"node's own")
    (tmp_path / "kubelet.abtest-original").write_bytes(b"node's own")
    restarted = tmp_path / "restarted"
    proc = subprocess.Popen(
        [
            "sh",
            "-c",
            deadman.TIMER_SCRIPT,
            "t",
            str(delay),
            str(tmp_path / "d.disarm"),
            str(tmp_path / "d.fired"),
            str(config),
            str(binary),
            f"echo restart > {restarted}",
            status,
        ],
        stdout=subprocess.PIPE,
    )
    return proc, config, binary, restarted


def test_the_timer_puts_the_originals_back_and_restarts_unless_disarmed(tmp_path: Path) -> None:
    proc, config, binary, restarted = _timer(tmp_path, 1)
    out, _ = proc.communicate(timeout=20)
    assert config.read_text() == "original\n" and binary.read_bytes() == b"node's own"
    assert restarted.read_text() == "restart\n" and (tmp_path / "d.fired").exists()
    assert b"fired" in out and b"put back" in out
    # the kept originals stay for `abtest node restore` to close the journal with
    assert (tmp_path / "config.yaml.abtest-original").exists()


def test_a_disarmed_timer_touches_nothing(tmp_path: Path) -> None:
    proc, config, binary, restarted = _timer(tmp_path, 30)
    (tmp_path / "d.disarm").touch()
    proc.communicate(timeout=10)
    assert config.read_text() == "ours\n" and binary.read_bytes() == b"candidate"
    assert not restarted.exists() and not (tmp_path / "d.fired").exists()
    assert not (tmp_path / "d.disarm").exists()


# --------------------------------------------------------------------------- the restart


def _restart(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, healthy: bool) -> list[str]:
    from abtest.node.health import HealthFailed, HealthReport, HealthWaiter
    from abtest.process.stop import SignalGuard

    path = tmp_path / "p.yaml"
    path.write_text(HEAD + POD + "health_timeout_s: 30\n")
    profile = load_profile(str(path))
    done: list[str] = []
    timer = deadman.Timer(7, "/x.disarm", "/x.fired", time.monotonic(), 0.0)
    monkeypatch.setattr(health, "node_status", lambda *a: (_ for _ in ()).throw(ClusterError()))
    monkeypatch.setattr(health, "node_clock", lambda s: 1.0)

    def arm(session: Any) -> deadman.Timer:
        done.append("arm")
        return timer

    monkeypatch.setattr(deadman, "arm", arm)
    monkeypatch.setattr(deadman, "restart_detached", lambda s, p: done.append("restart"))
    monkeypatch.setattr(deadman, "disarm", lambda s, t: done.append(f"disarm {t.pid}"))

    def wait_for_timer(session: Any, t: deadman.Timer, timeout: float) -> bool:
        done.append("wait")
        return True

    monkeypatch.setattr(deadman, "wait_for_timer", wait_for_timer)

    def wait(self: Any, *a: Any, **k: Any) -> HealthReport:
        done.append("verify")
        if not healthy:
            raise HealthFailed("ready", "not Ready", HealthReport())
        return HealthReport(1.0, 2.0, 3.0)

    monkeypatch.setattr(HealthWaiter, "wait", wait)
    session: Any = type("S", (), {"profile": profile})()
    cluster: Any = object()
    try:
        restart.restart_and_wait(
            profile,
            session,
            cluster,
            [],
            "healthzPort: 1\n",
            guard=SignalGuard(),
            timeout=30,
            progress=lambda m: None,
        )
    except HealthFailed:
        done.append("failed")
    return done


def test_the_timer_is_armed_before_and_disarmed_only_after_verification(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert _restart(monkeypatch, tmp_path, True) == ["arm", "restart", "verify", "disarm 7"]
    # not verified: never disarmed; the controller waits for the timer to bring the node back
    assert _restart(monkeypatch, tmp_path, False) == ["arm", "restart", "verify", "wait", "failed"]


def test_the_reports_method_names_each_nodes_transport() -> None:
    from abtest.analysis.transport import transport_method

    def data(env: dict[str, Any]) -> Any:
        return type("D", (), {"env": env})()

    assert transport_method(data({"transport": "a pod (img in namespace abtest-node)"})) == (
        "Node access: the node was reached through a pod (img in namespace abtest-node).",
    )
    two = {"nodes": {"b": {"transport": "SSH (b)"}, "a": {"transport": "a pod (i)"}}}
    assert transport_method(data(two)) == ("Node access: a through a pod (i); b through SSH (b).",)
    assert transport_method(data({})) == ()  # a run recorded before abtest wrote it


@pytest.mark.parametrize(("status", "restarts"), [("", False), ("true", False), ("false", True)])
def test_a_timer_with_nothing_to_put_back_restarts_only_a_stopped_kubelet(
    tmp_path: Path, status: str, restarts: bool
) -> None:
    proc, config, _, restarted = _timer(tmp_path, 1, ours="original\n", status=status)
    out, _ = proc.communicate(timeout=20)
    assert config.read_text() == "original\n" and (tmp_path / "d.fired").exists()
    assert restarted.exists() is restarts, out


def test_disarming_stops_the_timer_and_removes_its_files(tmp_path: Path) -> None:
    timer = subprocess.Popen(["sh", "-c", "sleep 30", "abtest-deadman"])
    base = tmp_path / "abtest-deadman.1"
    for name in ("abtest-deadman.1.log", "abtest-deadman.0.fired", "abtest-deadman.0.log"):
        (tmp_path / name).write_text("x")
    keep = tmp_path / "abtest-restart.log"
    keep.write_text("x")
    subprocess.run(
        ["sh", "-c", deadman.DISARM, "sh", f"{base}.disarm", str(timer.pid), f"{base}.log",
         str(tmp_path)],
        check=True,
        timeout=10,
    )  # fmt: skip
    assert timer.wait(5) != 0  # killed
    assert sorted(p.name for p in tmp_path.iterdir()) == [keep.name]
