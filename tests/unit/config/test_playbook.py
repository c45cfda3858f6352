"""Playbooks and node profiles: the shipped files load; bad input is one clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from abtest.config.playbook import Generator, load_playbook, load_profile
from abtest.errors import ConfigError


def test_agc_sweep_is_the_reference_method() -> None:
    pb = load_playbook("agc-sweep")
    assert pb.catalog == "agc" and pb.sizes == (50, 100, 150) and pb.rounds >= 5
    w, g = pb.workload, pb.generator
    assert w.image == "docker.io/library/busybox:1.36.1" and w.command == ("sleep", "3600")
    assert (w.cpu_request, w.memory_request, w.cpu_limit, w.memory_limit) == (
        "100m",
        "1Mi",
        "2",
        "128Mi",
    )
    assert (g.qps, g.concurrency, g.timeout_s, g.observe_s) == (1000, 150, 300, 10)
    assert isinstance(pb.seed, int)


def test_lab_sweep_and_regression_load() -> None:
    lab = load_playbook("lab-sweep")
    assert lab.catalog == "lab" and max(lab.sizes) <= 30 and lab.generator.observe_s == 10
    reg = load_playbook("regression")
    assert (
        reg.sizes == (150,)
        and reg.margin_pct == 5
        and set(reg.metrics) == {"batch_ready_s", "p95_s"}
    )


def test_playbook_by_path_and_overrides(tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("catalog: lab\nsizes: [3]\ngenerator: {qps: 10}\n")
    pb = load_playbook(str(path)).with_overrides(rounds=2, concurrency=5, seed=None)
    assert pb.sizes == (3,) and pb.rounds == 2 and pb.generator.concurrency == 5
    assert pb.generator.qps == 10 and pb.seed == 1
    assert pb.generator.start_dither_s == 1.0  # the default: one relist period
    path.write_text("catalog: lab\nsizes: [3]\ngenerator: {start_dither_s: 0}\n")
    assert load_playbook(str(path)).generator.start_dither_s == 0.0


def test_generator_overrides_given_flags_only() -> None:
    """`abtest batch` and Playbook.with_overrides share one rule: a flag given wins, None is
    "not given"."""
    gen = Generator(qps=10.0)
    assert gen.with_overrides(qps=None, concurrency=None) is gen
    assert gen.with_overrides(concurrency=5, observe_s=None) == Generator(qps=10.0, concurrency=5)


@pytest.mark.parametrize("name", ["lab", "kubeadm-systemd"])
def test_shipped_profiles_load(name: str) -> None:
    prof = load_profile(name)
    assert prof.kubelet_config_path.startswith("/")
    assert prof.node_name and prof.restart_command and prof.sandbox_count_command


BAD_PLAYBOOKS = {
    "malformed": ("catalog: lab\nsizes: [1,\n", "malformed YAML"),
    "unknown key": ("catalog: lab\nsize: [1]\n", "size: unknown key"),
    "missing catalog": ("sizes: [1]\n", "catalog: missing required key"),
    "wrong type": ("catalog: lab\nrounds: five\n", "rounds: expected an integer"),
    "bad sizes": ("catalog: lab\nsizes: [0]\n", "sizes: expected integers >= 1"),
    "bad namespace": ("catalog: lab\nnamespace: Not_OK\n", "invalid namespace"),
    "bad quantity": ("catalog: lab\nworkload: {requests: {cpu: lots}}\n", "requests.cpu"),
    "unknown generator key": ("catalog: lab\ngenerator: {rate: 5}\n", "generator.rate"),
    "bad design": ("catalog: lab\ndesign: random\n", "unknown design"),
    "negative start dither": ("catalog: lab\ngenerator: {start_dither_s: -1}\n", "start_dither_s"),
    "dither past a minute": ("catalog: lab\ngenerator: {start_dither_s: 61}\n", "start_dither_s"),
}


@pytest.mark.parametrize("case", sorted(BAD_PLAYBOOKS))
def test_bad_playbook(tmp_path: Path, case: str) -> None:
    text, message = BAD_PLAYBOOKS[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_playbook(str(path))
    assert str(path) in err.value.one_line() and message in err.value.one_line()


BAD_PROFILES = {
    "password": (
        "node_name: n\nssh: {host: h, password: x}\nkubelet: {config_path: /a, binary_path: /b}\n",
        "passwords are not accepted",
    ),
    "relative path": (
        "node_name: n\nssh: {host: h}\nkubelet: {config_path: a.yaml, binary_path: /b}\n",
        "absolute path",
    ),
    "missing ssh": (
        "node_name: n\nkubelet: {config_path: /a, binary_path: /b}\n",
        "ssh: missing required key",
    ),
    "unknown key": (
        "node_name: n\nssh: {host: h}\nkubelet: {config_path: /a, binary_path: /b, restart: x}\n",
        "kubelet.restart: unknown key",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PROFILES))
def test_bad_profile(tmp_path: Path, case: str) -> None:
    text, message = BAD_PROFILES[case]
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        load_profile(str(path))
    assert message in err.value.one_line()


def test_unknown_profile_name() -> None:
    with pytest.raises(ConfigError, match="unknown node profile 'nope'"):
        load_profile("nope")
