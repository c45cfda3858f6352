"""Issue 35's values that cannot be right, through the real CLI in the table shape of
:mod:`bad_input` (input -> exit 2 -> the words of the one error line): probabilities outside
(0, 1), a regress margin out of its documented range, a pod_field the pod spec does not have
(or a scalar for a structured field), profile commands that are empty or hold a NUL, node paths
with ``..`` segments, a node name with shell characters, an empty image, an empty
``--kubernetes``, and names with a trailing newline."""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input import PLAYBOOK, PROFILE, Case, ids, run_case

from abtest.errors import UserError
from abtest.store.db import Store

HEADER = "arm,size,block,batch_ready_s\n"
GOOD_ROWS = "a,50,1,2.0\na,50,2,2.1\nb,50,1,1.5\nb,50,2,1.6\n"
REGRESS = ("regress", "--csv", "{tmp}/r.csv", "--reference", "a", "--candidate", "b")
HISTORY = ("history", "--node", "n1")


def pvalue(value: str) -> Case:
    return Case(f"history-max-pvalue-{value}", (*HISTORY, "--max-pvalue", value),
                ("--max-pvalue", "between 0 and 1"))  # fmt: skip


def margin(value: str, *words: str) -> Case:
    return Case(f"regress-margin-{value}", (*REGRESS, "--margin", value), words,
                {"r.csv": HEADER + GOOD_ROWS})  # fmt: skip


FLAG_CASES = [
    *(pvalue(v) for v in ("2", "1", "nan", "-1", "0", "inf", "-inf")),
    margin("1e9", "above 100 %"),
    margin("100.5", "above 100 %"),
    margin("-1", "negative"),
    Case(
        "regress-margin-playbook-1e9",
        ("plan", "--playbook", "{tmp}/p.yaml", "--profile", "lab"),
        ("p.yaml", "above 100 %"),
        {"p.yaml": PLAYBOOK + "margin_pct: 1000000000\n"},
    ),
    Case(
        "lab-up-kubernetes-empty",
        ("lab", "up", "--kubernetes", ""),
        ("--kubernetes", "is not a Kubernetes release"),
    ),
    Case(
        "lab-up-kubernetes-newline",
        ("lab", "up", "--kubernetes", "v1.36.3\n"),
        ("--kubernetes", "is not a Kubernetes release"),
    ),
    Case(
        "set-path-newline",
        ("node", "apply", "--profile", "lab", "--set", "kubeAPIQPS\n=5"),
        ("--set", "NUL or line break"),
    ),
    Case(
        "set-value-nul",
        ("node", "apply", "--profile", "lab", "--set", "kubeAPIQPS=5\x00"),
        ("--set", "NUL or line break"),
    ),
    Case(
        "namespace-newline",
        ("plan", "--playbook", "lab-sweep", "--namespace", "abtest\n"),
        ("invalid namespace",),
    ),
]

LIST = ("gates", "--list", "--catalog", "{tmp}/c.yaml")


def pod_factor(id: str, field: str, on: str, off: str, *words: str) -> Case:
    text = (
        "catalog: t\nfactors:\n  - name: f\n    kind: pod_field\n"
        f"    field: {field}\n    on: {on}\n    off: {off}\n    summary: s\n"
    )
    return Case(id, LIST, ("c.yaml", *words), {"c.yaml": text})


CATALOG_CASES = [
    pod_factor(
        "pod-field-typo",
        "automountServiceAcountToken",
        "true",
        "false",
        "no field",
        "did you mean automountServiceAccountToken",
    ),
    pod_factor("pod-field-containers-scalar", "containers", "a", "b", "not a scalar"),
    pod_factor("pod-field-affinity-scalar", "affinity", "true", "false", "not a scalar"),
    pod_factor("pod-field-wrong-type", "enableServiceLinks", "'yes'", "'no'", "is a bool, got str"),
    pod_factor("pod-field-newline", '"nodeName\\n"', "a", "b", "invalid pod spec field"),
    pod_factor(
        "pod-field-int-bool", "terminationGracePeriodSeconds", "true", "false", "is a int, got bool"
    ),
    Case(
        "gate-name-newline",
        LIST,
        ("c.yaml", "invalid feature gate name"),
        {"c.yaml": 'catalog: t\nfactors:\n  - {name: "X\\n", kind: feature_gate, summary: s}\n'},
    ),
    Case(
        "config-path-newline",
        LIST,
        ("c.yaml", "invalid"),
        {
            "c.yaml": 'catalog: t\nfactors:\n  - {name: "kubeAPIQPS\\n", kind: config_field, '
            "on: 3, off: 50, summary: s}\n"
        },
    ),
]

NODE = ("plan", "--playbook", "lab-sweep", "--profile", "{tmp}/n.yaml")
KUBELET = "  binary_path: /usr/bin/kubelet\n"


def profile(id: str, old: str, new: str, *words: str) -> Case:
    assert old in PROFILE, old
    return Case(id, NODE, ("n.yaml", *words), {"n.yaml": PROFILE.replace(old, new)},
                untouched=("X",))  # fmt: skip


def command(id: str, section: str, key: str, value: str, *words: str) -> Case:
    """A command field of the profile's ``kubelet`` or ``commands`` section."""
    if section == "kubelet":
        return profile(id, KUBELET, f"{KUBELET}  {key}: {value}\n", key, *words)
    return profile(id, KUBELET, f"{KUBELET}commands:\n  {key}: {value}\n", key, *words)


PROFILE_CASES = [
    *(
        command(f"prof-{k}-empty", s, k, '""', "is empty")
        for s, k in [
            ("kubelet", "log_command"),
            ("kubelet", "status_command"),
            ("kubelet", "pid_command"),
            ("commands", "sandbox_count"),
            ("commands", "image_present"),
            ("commands", "runtime_handlers"),
        ]
    ),
    *(
        command(f"prof-{k}-nul", s, k, '"crictl\\0 x"', "NUL")
        for s, k in [
            ("kubelet", "log_command"),
            ("kubelet", "status_command"),
            ("kubelet", "pid_command"),
            ("commands", "sandbox_count"),
            ("commands", "image_present"),
        ]
    ),
    profile(
        "prof-config-path-dotdot",
        "  config_path: /var/lib/kubelet/config.yaml\n",
        "  config_path: /var/lib/kubelet/../../tmp/config.yaml\n",
        "config_path",
        ".. segment",
    ),
    profile(
        "prof-binary-path-dotdot",
        KUBELET,
        "  binary_path: /usr/bin/../../tmp/kubelet\n",
        "binary_path",
        ".. segment",
    ),
    profile(
        "prof-lock-path-dotdot",
        "profile: t\n",
        "profile: t\nlock_path: /var/lib/../tmp/l\n",
        "lock_path",
        ".. segment",
    ),
    profile(
        "prof-node-name-shell",
        "node_name: n1\n",
        "node_name: 'n1;$(touch {tmp}/X)'\n",
        "node_name",
        "invalid node name",
    ),
    profile("prof-node-name-dotdot", "node_name: n1\n", "node_name: ../n1\n", "invalid node name"),
    profile(
        "prof-node-name-newline", "node_name: n1\n", 'node_name: "n1\\n"\n', "invalid node name"
    ),
    profile(
        "prof-host-newline-end",
        "  host: n1.example\n",
        '  host: "n1.example\\n"\n',
        "invalid host name",
    ),
]

PLAN = ("plan", "--playbook", "{tmp}/p.yaml", "--profile", "lab")
PLAYBOOK_CASES = [
    Case(
        "pb-image-empty",
        PLAN,
        ("p.yaml", "image", "empty"),
        {"p.yaml": PLAYBOOK + 'workload:\n  image: ""\n'},
    ),
    Case(
        "pb-image-shell",
        PLAN,
        ("p.yaml", "invalid image reference"),
        {"p.yaml": PLAYBOOK + "workload:\n  image: 'busybox;reboot'\n"},
    ),
    Case(
        "pb-cpu-newline",
        PLAN,
        ("p.yaml", "invalid resource quantity"),
        {"p.yaml": PLAYBOOK + 'workload:\n  requests: {cpu: "100m\\n"}\n'},
    ),
    Case(
        "pb-runtime-class-newline",
        PLAN,
        ("p.yaml", "invalid RuntimeClass name"),
        {"p.yaml": PLAYBOOK + 'workload:\n  runtime_class: "runc\\n"\n'},
    ),
    Case(
        "pb-annotation-newline",
        PLAN,
        ("p.yaml", "invalid annotation key"),
        {"p.yaml": PLAYBOOK + 'workload:\n  annotations: {"a/b\\n": x}\n'},
    ),
]

ALL = FLAG_CASES + CATALOG_CASES + PROFILE_CASES + PLAYBOOK_CASES


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ALL, ids=ids(ALL))
def test_a_value_that_cannot_be_right_is_one_line(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_case(case, tmp_path, capsys)


@pytest.mark.parametrize("run_id", ["../../etc", "a/b", "x\n", "", "-rf", "a\x00"])
def test_a_run_id_that_is_no_name_is_refused_before_any_lookup(run_id: str, tmp_path: Path) -> None:
    with Store(tmp_path / "r.sqlite") as store, pytest.raises(UserError, match="invalid run id"):
        store.run_row(run_id)
