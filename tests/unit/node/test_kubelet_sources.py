"""Where a kubelet's settings really come from (issue 14): flags and drop-ins that would win
over the config file are found from the running kubelet's command line and refused."""

from __future__ import annotations

import base64
import dataclasses
import re
from pathlib import Path
from typing import Any

import pytest

from abtest.config.playbook import load_profile, parse_profile
from abtest.errors import UserError
from abtest.node import kubelet_sources as ks
from abtest.node import preflight
from abtest.node.connection import Result

CONFIG = "/var/lib/kubelet/config.yaml"
BIN = "/usr/bin/kubelet"
KUBEADM = [BIN, f"--config={CONFIG}", "--kubeconfig=/etc/kubernetes/kubelet.conf"]


def dropin(text: str) -> str:
    return "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + text


class FakeSSH:
    """A node's /proc and files, answered the way the real commands answer."""

    def __init__(self, procs: dict[int, tuple[list[str], str]], files: dict[str, str]) -> None:
        self.procs = procs  # pid -> (argv, exe)
        self.files = files
        self.commands: list[list[str]] = []
        self.links: dict[str, str] = {}  # symlink -> the file it names

    def run(self, argv: list[str], *, sudo: bool = False, timeout: float = 0) -> Result:
        self.commands.append(argv)
        if argv[:2] == ["sh", "-c"] and "readlink" in argv[2]:
            pids = [str(p) for p, (_, exe) in self.procs.items() if exe in (argv[4],)]
            return Result("find", 0, "\n".join(pids) + "\n", "")
        if argv[:2] == ["sh", "-c"] and "cmdline" in argv[2]:
            pid = int(argv[4])
            if pid not in self.procs:
                return Result("cmdline", 1, "", "No such file or directory")
            raw = "".join(a + "\x00" for a in self.procs[pid][0]).encode()
            return Result("cmdline", 0, base64.b64encode(raw).decode(), "")
        if argv[:2] == ["readlink", "-f"]:
            return Result("realpath", 0, self.links.get(argv[3], argv[3]) + "\n", "")
        if argv[0] == "readlink":
            return Result("cwd", 0, "/var/lib/kubelet\n", "")
        if argv[0] == "find":
            root = argv[1].rstrip("/") + "/"
            found = [p for p in self.files if p.startswith(root) and p.endswith(".conf")]
            return Result("find", 0, "\n".join(reversed(found)) + "\n", "")
        raise AssertionError(f"unexpected command {argv}")

    def read_bytes(self, path: str, *, sudo: bool = False) -> bytes:
        return self.files[path].encode()


class FakeNode:
    def __init__(self, ssh: FakeSSH, **profile_changes: Any) -> None:
        changes = {"pid_command": None, **profile_changes}
        self.profile = dataclasses.replace(
            load_profile("kubeadm-systemd"), kubelet_config_path=CONFIG, **changes
        )
        self.ssh = ssh
        self.shell: list[str] = []

    def profile_command(self, command: str, *, timeout: float = 0) -> Result:
        self.shell.append(command)
        return Result(command, 0, " ".join(str(p) for p in self.ssh.procs) + "\n", "")


def sources_check(node: FakeNode, settings: dict[str, Any]) -> str:
    return preflight._sources(node, settings)  # type: ignore[arg-type]


# --------------------------------------------------------------------------- parsing


def test_flags_parse_as_pflag_reads_them() -> None:
    argv = [BIN, "--feature-gates=A=true,B=false", "--kube-api-qps", "7", "--fail-swap-on"]
    argv += ["-v=2", "--max_pods=20", "--", "--kube-api-burst=9"]
    flags = ks.parse_flags(argv)
    got = [(f.name, f.value, f.field) for f in flags]
    assert got == [
        ("feature-gates", "A=true,B=false", "featureGates"),
        ("kube-api-qps", "7", "kubeAPIQPS"),
        ("fail-swap-on", None, "failSwapOn"),
        ("v", "2", "logging.verbosity"),
        ("max-pods", "20", "maxPods"),  # _ normalized to -, as WordSepNormalizeFunc does
    ]


def test_feature_gate_flag_wins_only_for_the_gates_it_names() -> None:
    flags = ks.parse_flags([BIN, "--feature-gates=A=true, B=false"])
    assert ks.winning_flag("featureGates.A", flags) is not None
    assert ks.winning_flag("featureGates.B", flags) is not None
    assert ks.winning_flag("featureGates.C", flags) is None
    assert ks.winning_flag("kubeAPIQPS", flags) is None


def test_the_last_flag_wins() -> None:
    flags = ks.parse_flags([BIN, "--kube-api-qps=5", "--kube-api-qps", "9"])
    winner = ks.winning_flag("kubeAPIQPS", flags)
    assert winner is not None and winner.written == "--kube-api-qps 9"


def test_map_flags_replace_the_whole_map() -> None:
    flags = ks.parse_flags([BIN, "--eviction-hard=memory.available<100Mi"])
    assert ks.winning_flag("evictionHard.nodefs.available", flags) is not None


def test_dropin_merge_patch_rules() -> None:
    data = {"featureGates": {"A": True}, "evictionHard": None, "kubeAPIQPS": 3}
    assert ks.dropin_sets(data, "featureGates.A")
    assert not ks.dropin_sets(data, "featureGates.B")  # maps merge key by key
    assert ks.dropin_sets(data, "evictionHard.memory.available")  # null removes the map
    assert ks.dropin_sets(data, "kubeAPIQPS")
    assert not ks.dropin_sets(data, "maxPods")


def test_walk_order_is_filepath_walkdir_order() -> None:
    paths = ["/d/b.conf", "/d/a.conf", "/d/a/z.conf", "/d/10-x.conf"]
    assert ks.walk_order(paths) == ["/d/10-x.conf", "/d/a/z.conf", "/d/a.conf", "/d/b.conf"]


# --------------------------------------------------------------------------- on a node


def test_gate_set_by_kubelet_extra_args_is_refused_naming_the_flag() -> None:
    argv = [*KUBEADM, "--feature-gates=InPlacePodVerticalScaling=false"]
    node = FakeNode(FakeSSH({4242: (argv, BIN)}, {}))
    with pytest.raises(UserError) as err:
        sources_check(node, {"featureGates.InPlacePodVerticalScaling": True, "maxPods": 5})
    text = str(err.value)
    assert "featureGates.InPlacePodVerticalScaling" in text
    assert "`--feature-gates=InPlacePodVerticalScaling=false`" in text
    assert "maxPods" not in text.split("(")[0]  # only the conflicting factor is named
    assert CONFIG in text


def test_field_set_in_a_dropin_is_refused_naming_the_last_file() -> None:
    argv = [*KUBEADM, "--config-dir=/etc/kubernetes/kubelet.conf.d"]
    files = {
        "/etc/kubernetes/kubelet.conf.d/10-qps.conf": dropin("kubeAPIQPS: 20\n"),
        "/etc/kubernetes/kubelet.conf.d/20-qps.conf": dropin("kubeAPIQPS: 30\n"),
        "/etc/kubernetes/kubelet.conf.d/30-other.conf": dropin("maxPods: 50\n"),
        "/etc/kubernetes/kubelet.conf.d/notes.txt": "kubeAPIQPS: 1\n",
    }
    node = FakeNode(FakeSSH({7: (argv, BIN)}, files))
    with pytest.raises(UserError) as err:
        sources_check(node, {"kubeAPIQPS": 5})
    text = str(err.value)
    assert "set by the drop-in /etc/kubernetes/kubelet.conf.d/20-qps.conf" in text
    assert "also set by /etc/kubernetes/kubelet.conf.d/10-qps.conf" in text
    assert "notes.txt" not in text


def test_a_flag_beats_a_dropin_and_both_are_named() -> None:
    argv = [*KUBEADM, "--config-dir", "/etc/kubelet.d", "--kube-api-qps=9"]
    files = {"/etc/kubelet.d/50.conf": dropin("kubeAPIQPS: 20\n")}
    node = FakeNode(FakeSSH({7: (argv, BIN)}, files))
    with pytest.raises(UserError, match=r"`--kube-api-qps=9`.*also set by /etc/kubelet.d/50.conf"):
        sources_check(node, {"kubeAPIQPS": 5})


def test_no_conflict_passes_and_says_what_it_read() -> None:
    argv = [*KUBEADM, "--feature-gates=Other=true", "--config-dir=/etc/kubelet.d"]
    files = {"/etc/kubelet.d/50.conf": dropin("maxPods: 50\n")}
    node = FakeNode(FakeSSH({7: (argv, BIN)}, files))
    detail = sources_check(node, {"featureGates.Mine": True, "kubeAPIQPS": 5})
    assert detail.startswith(f"pid 7, --config {CONFIG}")
    assert "--feature-gates" in detail and "50.conf" in detail


def test_the_kubelet_reading_the_profiles_file_is_chosen_among_several() -> None:
    other = [BIN, "--config=/var/lib/other/config.yaml", "--kube-api-qps=1"]
    mine = [*KUBEADM, "--max-pods=10"]
    node = FakeNode(FakeSSH({11: (other, BIN), 12: (mine, BIN)}, {}))
    assert sources_check(node, {"kubeAPIQPS": 5}).startswith("pid 12")
    with pytest.raises(UserError, match="--max-pods=10"):
        sources_check(node, {"maxPods": 5})


def test_a_kubelet_reading_another_file_fails_the_check() -> None:
    node = FakeNode(FakeSSH({11: ([BIN, "--config=/etc/other.yaml"], BIN)}, {}))
    with pytest.raises(UserError, match=f"reads --config /etc/other.yaml, not .*{CONFIG}"):
        sources_check(node, {})


def test_a_config_path_through_a_symlink_is_the_same_file() -> None:
    ssh = FakeSSH({11: ([BIN, "--config=/etc/kubelet/config.yaml", "--max-pods=3"], BIN)}, {})
    ssh.links = {"/etc/kubelet/config.yaml": CONFIG}
    with pytest.raises(UserError, match="--max-pods=3"):
        sources_check(FakeNode(ssh), {"maxPods": 5})


def test_a_relative_config_is_read_from_the_process_directory() -> None:
    node = FakeNode(FakeSSH({11: ([BIN, "--config=config.yaml"], BIN)}, {}))
    assert sources_check(node, {}).startswith("pid 11")


def test_no_kubelet_running_says_how_it_looked() -> None:
    node = FakeNode(FakeSSH({}, {}))
    with pytest.raises(
        UserError, match=re.escape(f"no running kubelet found by a process running {BIN}")
    ):
        sources_check(node, {})


def test_pid_command_from_the_profile_is_used_and_validated(tmp_path: Path) -> None:
    node = FakeNode(FakeSSH({31: (KUBEADM, "/elsewhere")}, {}), pid_command="cat /run/k.pid")
    assert sources_check(node, {}).startswith("pid 31")
    assert node.shell == ["cat /run/k.pid"]
    bad = FakeNode(FakeSSH({}, {}), pid_command="echo kubelet")

    def says_kubelet(command: str, timeout: float = 0) -> Result:
        return Result(command, 0, "kubelet\n", "")

    bad.profile_command = says_kubelet  # type: ignore[method-assign]
    with pytest.raises(UserError, match="expected process ids"):
        sources_check(bad, {})


def test_profile_field_pid_command_parses(tmp_path: Path) -> None:
    src = Path(load_profile("kubeadm-systemd").source).read_text()
    path = tmp_path / "p.yaml"
    path.write_text(
        src.replace("systemctl show --property MainPID --value kubelet", "pidof kubelet")
    )
    assert parse_profile(path).pid_command == "pidof kubelet"
    assert load_profile("lab").pid_command is None  # the processes running binary_path
    # a systemd unit's MainPID; 0 while it is stopped, which no process has
    assert load_profile("kubeadm-systemd").pid_command == (
        "systemctl show --property MainPID --value kubelet"
    )


def test_a_stopped_unit_main_pid_0_is_no_kubelet() -> None:
    node = FakeNode(
        FakeSSH({}, {}), pid_command="systemctl show --property MainPID --value kubelet"
    )

    def says_0(command: str, timeout: float = 0) -> Result:
        return Result(command, 0, "0\n", "")

    node.profile_command = says_0  # type: ignore[method-assign]
    with pytest.raises(
        UserError, match=re.escape("no running kubelet found by kubelet.pid_command")
    ):
        sources_check(node, {})
