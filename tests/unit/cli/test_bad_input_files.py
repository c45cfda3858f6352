"""Bad catalogs, playbooks and node profiles, through the real CLI: each is exit 2 with one
line naming the file (and field or line) and what to do; no traceback, no hang, nothing run.
The table is in :mod:`bad_input`'s shape: file -> exit code -> words of the error."""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input import (
    CATALOG,
    PLAYBOOK,
    PROFILE,
    Case,
    alias_bomb,
    deep_list,
    ids,
    run_case,
)

LIST = ("gates", "--list", "--catalog", "{tmp}/c.yaml")


def catalog(id: str, text: str | bytes, *words: str) -> Case:
    return Case(id, LIST, ("c.yaml", *words), {"c.yaml": text})


def factor(id: str, body: str, *words: str) -> Case:
    return catalog(id, "catalog: t\nfactors:\n  - " + body.replace("\n", "\n    ") + "\n", *words)


CATALOG_CASES = [
    catalog("cat-latin1", "catalog: caf\xe9\n".encode("latin-1") + b"factors: []\n", "utf-8"),
    catalog("cat-utf16", CATALOG.encode("utf-16"), "utf-8"),
    catalog("cat-dup-top", "catalog: a\ncatalog: b\nfactors: []\n", "twice", "lines 1 and 2"),
    factor(
        "cat-dup-in-factor",
        "name: kubeAPIQPS\nkind: config_field\non: 3\non: 4\noff: 5\nsummary: s",
        "'on' is given twice",
        "lines 5 and 6",
    ),
    catalog("cat-deep-list", "catalog: t\nfactors: " + deep_list(10_000) + "\n", "nested deeper"),
    catalog("cat-deep-map", "catalog: t\nx: " + "{a: " * 2000 + "1" + "}" * 2000, "nested"),
    catalog("cat-alias-bomb", alias_bomb() + CATALOG, "aliases"),
    catalog(
        "cat-alias-bomb-in-on",
        alias_bomb()
        + "catalog: t\nfactors:\n  - {name: x, kind: kubelet_settings, on: *a8, off: {a: 1}, "
        "summary: s}\n",
        "aliases",
    ),
    factor(
        "cat-nan-on",
        "name: kubeAPIQPS\nkind: config_field\non: .nan\noff: .nan\nsummary: s",
        "finite",
        "factors[0].on",
    ),
    factor(
        "cat-inf-off",
        "name: kubeAPIQPS\nkind: config_field\non: 3\noff: .inf\nsummary: s",
        "finite",
        "factors[0].off",
    ),
    factor(
        "cat-neg-inf",
        "name: kubeAPIQPS\nkind: config_field\non: -.inf\noff: 3\nsummary: s",
        "finite",
    ),
    factor(
        "cat-1e400",
        "name: kubeAPIQPS\nkind: config_field\non: 1.0e+400\noff: 3\nsummary: s",
        "finite",
    ),
    factor(
        "cat-huge-int",
        "name: kubeAPIQPS\nkind: config_field\non: 1000000000000000000000000\noff: 3\nsummary: s",
        "must be between",
    ),
    factor(
        "cat-nan-settings",
        "name: q\nkind: kubelet_settings\non: {kubeAPIQPS: .nan}\n"
        "off: {kubeAPIQPS: 50}\nsummary: s",
        "finite",
        "on.kubeAPIQPS",
    ),
    factor("cat-same", "name: kubeAPIQPS\nkind: config_field\non: 3\noff: 3\nsummary: s", "same"),
    factor("cat-kind", "name: x\nkind: magic\non: 1\noff: 2\nsummary: s", "unknown kind"),
    factor(
        "cat-no-summary",
        "name: kubeAPIQPS\nkind: config_field\non: 1\noff: 2",
        "summary",
        "missing required key",
    ),
    factor(
        "cat-gate-string",
        "name: Foo\nkind: feature_gate\non: 'yes'\noff: false\nsummary: s",
        "true or false",
    ),
    factor(
        "cat-gate-name",
        "name: Foo-Bar\nkind: feature_gate\non: true\noff: false\nsummary: s",
        "invalid feature gate name",
    ),
    factor(
        "cat-runtime-class",
        "name: rt\nkind: runtime_class\non: Bad_Class\noff: runc\nsummary: s",
        "invalid runtimeclass name",
    ),
    factor(
        "cat-annotation-key",
        "name: an\nkind: pod_annotation\nannotation: -bad\non: 'a'\noff: 'b'\nsummary: s",
        "invalid annotation key",
    ),
    factor(
        "cat-annotation-value",
        "name: an\nkind: pod_annotation\nannotation: a.io/b\non: 5\noff: 'b'\nsummary: s",
        "must be a string",
    ),
    factor(
        "cat-settings-keys",
        "name: q\nkind: kubelet_settings\non: {kubeAPIQPS: 3}\noff: {kubeAPIBurst: 5}\nsummary: s",
        "same paths",
    ),
    factor(
        "cat-settings-gate",
        "name: q\nkind: kubelet_settings\non: {featureGates.X: 1}\n"
        "off: {featureGates.X: false}\nsummary: s",
        "true or false",
    ),
    factor(
        "cat-control-char",
        'name: kubeAPIQPS\nkind: config_field\non: "a\\nb"\noff: b\nsummary: s',
        "control characters",
    ),
    catalog("cat-top-list", "- a\n- b\n", "expected a mapping"),
    catalog("cat-empty", "", "expected a mapping"),
    catalog("cat-no-factors", "catalog: t\nfactors: []\n", "non-empty list"),
    catalog(
        "cat-too-many",
        "catalog: t\nfactors:\n"
        + "".join(
            f"  - {{name: f{i}, kind: config_field, on: 1, off: 2, summary: s}}\n"
            for i in range(65)
        ),
        "more than 64",
    ),
    catalog("cat-huge-file", CATALOG + "#" * 2_100_000 + "\n", "bytes, more than"),
    catalog("cat-unknown-key", CATALOG + "extra: 1\n", "unknown key", "extra"),
    catalog("cat-malformed", "catalog: [unclosed\n", "malformed yaml"),
    catalog("cat-nul", "catalog: t\x00\nfactors: []\n", "malformed yaml"),
    catalog(
        "cat-dup-factor",
        "catalog: t\nfactors:\n"
        "  - {name: a, kind: config_field, on: 1, off: 2, summary: s}\n"
        "  - {name: a, kind: config_field, on: 1, off: 2, summary: s}\n",
        "duplicate factor",
    ),
    Case(
        "cat-directory", ("gates", "--list", "--catalog", "{tmp}/d/"), ("directory",), {"d/x": "1"}
    ),
    Case("cat-missing", ("gates", "--list", "--catalog", "nope/c.yaml"), ("nope/c.yaml",)),
    Case(
        "cat-unknown-name",
        ("gates", "--list", "--catalog", "nosuch"),
        ("unknown catalog", "nosuch"),
    ),
]

PLAN = ("plan", "--playbook", "{tmp}/p.yaml", "--profile", "lab")


def playbook(
    id: str, extra: str, *words: str, base: str = PLAYBOOK, where: str = "p.yaml", **files: str
) -> Case:
    """A row whose error names ``where`` (the playbook, or the file it points at)."""
    return Case(id, PLAN, (where, *words), {"p.yaml": base + extra, **files})


def replaced(key: str, value: str) -> str:
    return "".join(
        f"{key}: {value}\n" if line.startswith(f"{key}:") else line + "\n"
        for line in PLAYBOOK.splitlines()
    )


PLAYBOOK_CASES = [
    playbook(
        "pb-rounds-million", "", "rounds", "between 1 and 1000", base=replaced("rounds", "1000000")
    ),
    playbook("pb-rounds-zero", "", "rounds", "between 1", base=replaced("rounds", "0")),
    playbook("pb-rounds-nan", "", "rounds", "integer", base=replaced("rounds", ".nan")),
    playbook(
        "pb-sizes-billion",
        "",
        "sizes",
        "between 1 and 10000",
        base=replaced("sizes", "[1000000000]"),
    ),
    playbook("pb-sizes-alias-bomb", "", "aliases", base=alias_bomb() + replaced("sizes", "*a8")),
    playbook(
        "pb-sizes-51", "", "sizes", "more than 50", base=replaced("sizes", str(list(range(1, 52))))
    ),
    playbook("pb-sizes-empty", "", "sizes", "non-empty", base=replaced("sizes", "[]")),
    playbook(
        "pb-seed-1e30",
        "",
        "seed",
        "between 0 and",
        base=replaced("seed", "1000000000000000000000000000000"),
    ),
    playbook("pb-seed-negative", "", "seed", "between 0", base=replaced("seed", "-1")),
    playbook("pb-qps-nan", "generator: {qps: .nan}\n", "generator.qps", "finite"),
    playbook("pb-qps-inf", "generator: {qps: .inf}\n", "generator.qps", "finite"),
    playbook("pb-qps-zero", "generator: {qps: 0}\n", "generator.qps", "between"),
    playbook("pb-timeout-nan", "generator: {timeout_s: .nan}\n", "timeout_s", "finite"),
    playbook("pb-observe-inf", "generator: {observe_s: .inf}\n", "observe_s", "finite"),
    playbook("pb-concurrency-0", "generator: {concurrency: 0}\n", "concurrency", "between"),
    playbook("pb-margin-nan", "margin_pct: .nan\n", "margin_pct", "finite"),
    playbook("pb-confidence-nan", "confidence: .nan\n", "confidence", "finite"),
    playbook("pb-max-rounds-huge", "max_rounds: 1000000000\n", "max_rounds", "between"),
    playbook("pb-namespace", "namespace: 'a;b'\n", "namespace", "invalid namespace"),
    playbook(
        "pb-runtime-class",
        "workload: {runtime_class: Bad_Class}\n",
        "workload.runtime_class",
        "invalid runtimeclass",
    ),
    playbook(
        "pb-annotation-key",
        "workload: {annotations: {'-bad': x}}\n",
        "workload.annotations",
        "invalid annotation key",
    ),
    playbook(
        "pb-template-missing",
        "workload: {template: missing.j2}\n",
        "workload.template",
        "not found",
    ),
    playbook(
        "pb-template-broken",
        "workload: {template: t.j2}\n",
        "t.j2:1",
        "does not parse",
        where="t.j2",
        **{"t.j2": "{% if %}"},
    ),
    playbook(
        "pb-template-unknown-var",
        "workload: {template: t.j2}\n",
        "unknown variable",
        where="t.j2",
        **{"t.j2": "kind: Pod\nmetadata: {name: {{ nosuch }}}\n"},
    ),
    playbook("pb-dup-key", "rounds: 4\n", "'rounds' is given twice", "lines 4 and 7"),
    playbook("pb-unknown-key", "extra: 1\n", "unknown key"),
    playbook("pb-design", "design: nope\n", "design"),
    playbook("pb-metric", "metrics: [foo]\n", "unknown metric"),
    playbook("pb-quantity", "workload: {requests: {cpu: lots}}\n", "invalid resource quantity"),
    playbook("pb-deep", "description: " + deep_list(10_000) + "\n", "nested deeper"),
    playbook(
        "pb-no-catalog",
        "",
        "catalog",
        "missing required key",
        base=PLAYBOOK.replace("catalog: lab\n", ""),
    ),
    playbook(
        "pb-catalog-unknown",
        "",
        "unknown catalog",
        "nosuch",
        base=replaced("catalog", "nosuch"),
        where="catalog",
    ),
    Case(
        "pb-latin1",
        PLAN,
        ("p.yaml", "utf-8"),
        {"p.yaml": PLAYBOOK.encode() + b"description: caf\xe9\n"},
    ),
    Case(
        "pb-schedule-too-big",
        PLAN,
        ("rounds, more than the 200000",),
        {"p.yaml": replaced("sizes", str(list(range(1, 51)))).replace("rounds: 3", "rounds: 1000")},
    ),
    Case(
        "pb-profile-field-missing",
        ("plan", "--playbook", "{tmp}/p.yaml"),
        ("unknown node profile", "elsewhere.yaml"),
        {"p.yaml": PLAYBOOK + "profile: ../elsewhere.yaml\n"},
    ),
    Case(
        "pb-unknown-name",
        ("plan", "--playbook", "nosuch", "--profile", "lab"),
        ("unknown playbook", "nosuch"),
    ),
]

NODE = ("plan", "--playbook", "lab-sweep", "--profile", "{tmp}/n.yaml")


def profile(id: str, old: str, new: str, *words: str) -> Case:
    assert old in PROFILE or old == "", old
    text = PROFILE.replace(old, new) if old else PROFILE + new
    return Case(id, NODE, ("n.yaml", *words), {"n.yaml": text}, untouched=("X",))


HOST = "  host: n1.example\n"
PROFILE_CASES = [
    profile(
        "prof-host-injection",
        HOST,
        '  host: "127.0.0.1;touch {tmp}/X;"\n',
        "ssh.host",
        "invalid host name",
    ),
    profile("prof-host-newline", HOST, '  host: "a\\n* ssh-ed25519 AAAA"\n', "invalid host name"),
    profile("prof-host-option", HOST, "  host: -oProxyCommand=x\n", "invalid host name"),
    profile("prof-host-space", HOST, '  host: "a b"\n', "invalid host name"),
    profile("prof-host-wildcard", HOST, '  host: "*"\n', "invalid host name"),
    profile("prof-host-percent", HOST, '  host: "a%h"\n', "invalid host name"),
    profile("prof-host-ipv6", HOST, '  host: "[::1"\n', "ipv6"),
    profile("prof-host-quote", HOST, '  host: "a\'b"\n', "invalid host name"),
    profile("prof-host-number", HOST, "  host: 5\n", "ssh.host"),
    profile(
        "prof-user-injection", HOST, HOST + '  user: "root;id"\n', "ssh.user", "invalid user name"
    ),
    profile("prof-user-newline", HOST, HOST + '  user: "a\\nb"\n', "invalid user name"),
    profile("prof-user-dash", HOST, HOST + "  user: -x\n", "invalid user name"),
    profile("prof-port-zero", HOST, HOST + "  port: 0\n", "ssh.port", "between 1 and 65535"),
    profile("prof-port-70000", HOST, HOST + "  port: 70000\n", "between 1 and 65535"),
    profile("prof-port-negative", HOST, HOST + "  port: -1\n", "between 1 and 65535"),
    profile("prof-port-string", HOST, HOST + '  port: "22"\n', "integer"),
    profile("prof-port-bool", HOST, HOST + "  port: true\n", "ssh.port"),
    profile("prof-port-nan", HOST, HOST + "  port: .nan\n", "ssh.port"),
    profile(
        "prof-restart-empty",
        "  binary_path: /usr/bin/kubelet\n",
        "  binary_path: /usr/bin/kubelet\n  restart_command: ''\n",
        "kubelet.restart_command",
        "is empty",
    ),
    profile(
        "prof-restart-blank",
        "  binary_path: /usr/bin/kubelet\n",
        "  binary_path: /usr/bin/kubelet\n  restart_command: '   '\n",
        "is empty",
    ),
    profile("prof-lock-relative", "", "lock_path: node.lock\n", "lock_path", "absolute"),
    profile(
        "prof-remove-all",
        "",
        "commands:\n  sandbox_remove: crictl rmp --all --force\n",
        "commands.sandbox_remove",
        "{ids}",
    ),
    profile(
        "prof-stop-all",
        "",
        "commands:\n  round_sandboxes: crictl pods -o json\n"
        "  sandbox_stop: crictl stopp --all\n  sandbox_remove: crictl rmp {ids}\n",
        "commands.sandbox_stop",
        "{ids}",
    ),
    profile("prof-health-nan", "", "health_timeout_s: .nan\n", "health_timeout_s", "finite"),
    profile("prof-health-inf", "", "health_timeout_s: .inf\n", "health_timeout_s", "finite"),
    profile("prof-health-zero", "", "health_timeout_s: 0\n", "health_timeout_s", "between"),
    profile(
        "prof-config-relative",
        "/var/lib/kubelet/config.yaml",
        "config.yaml",
        "kubelet.config_path",
        "absolute",
    ),
    profile("prof-password", HOST, HOST + "  password: hunter2\n", "passwords are not accepted"),
    profile("prof-dup-key", "", "node_name: n2\n", "'node_name' is given twice"),
    profile("prof-no-node-name", "node_name: n1\n", "", "node_name", "missing required key"),
    profile("prof-unknown-key", "", "extra: 1\n", "unknown key"),
    profile("prof-alias-bomb", "profile: t\n", "profile: t\n" + alias_bomb(), "aliases"),
    Case("prof-latin1", NODE, ("n.yaml", "utf-8"), {"n.yaml": PROFILE.encode() + b"# \xff\n"}),
    Case(
        "prof-missing-path",
        ("plan", "--playbook", "lab-sweep", "--profile", "./nope.yaml"),
        ("--profile", "unknown node profile", "nope.yaml"),
    ),
    Case(
        "prof-directory",
        ("plan", "--playbook", "lab-sweep", "--profile", "{tmp}/d"),
        ("--profile", "directory"),
        {"d/x": "1"},
    ),
    Case("prof-empty-name", ("plan", "--playbook", "lab-sweep", "--profile", ""), ("--profile",)),
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", CATALOG_CASES, ids=ids(CATALOG_CASES))
def test_bad_catalog(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_case(case, tmp_path, capsys)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", PLAYBOOK_CASES, ids=ids(PLAYBOOK_CASES))
def test_bad_playbook(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_case(case, tmp_path, capsys)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", PROFILE_CASES, ids=ids(PROFILE_CASES))
def test_bad_profile(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_case(case, tmp_path, capsys)
