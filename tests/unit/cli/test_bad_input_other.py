"""Bad rounds CSVs, kube-burner and clusterloader2 folders, flags, ssh configs, kubeconfigs,
--db paths and report outputs, through the real CLI, in the table shape of
:mod:`bad_input` (input -> exit code -> words the one error line must contain)."""

from __future__ import annotations

from pathlib import Path

import pytest
from bad_input import PROFILE, Case, deep_list, ids, run_case

FIXTURES = Path(__file__).parents[2] / "fixtures"
HEADER = "arm,size,block,batch_ready_s\n"
GOOD_ROWS = "a,50,1,2.0\na,50,2,2.1\nb,50,1,1.5\nb,50,2,1.6\n"


def rounds(id: str, text: str | bytes, *words: str) -> Case:
    return Case(id, ("analyze", "{tmp}/r.csv"), ("r.csv", *words), {"r.csv": text})


def bad_cell(id: str, size: str, value: str, *words: str) -> Case:
    return rounds(id, HEADER + GOOD_ROWS + f"a,{size},3,{value}\nb,{size},3,{value}\n", *words)


CSV_CASES = [
    bad_cell("csv-size-1e30", "1e30", "2.0", "line 6", "column size", "from 1 to 10000"),
    bad_cell("csv-size-1e400", "1e400", "2.0", "column size", "from 1 to 10000"),
    bad_cell("csv-size-1e20", "100000000000000000000", "2.0", "from 1 to 10000"),
    bad_cell("csv-size-negative", "-5", "2.0", "column size"),
    bad_cell("csv-size-nan", "nan", "2.0", "column size"),
    bad_cell("csv-size-fraction", "50.5", "2.0", "whole number"),
    bad_cell("csv-metric-1e308", "50", "1e308", "column batch_ready_s", "from 1e-09 to"),
    bad_cell("csv-metric-1e-320", "50", "1e-320", "column batch_ready_s", "from 1e-09 to"),
    bad_cell("csv-metric-inf", "50", "inf", "batch_ready_s"),
    bad_cell("csv-metric-nan", "50", "nan", "batch_ready_s"),
    bad_cell("csv-metric-1e400", "50", "1e400", "batch_ready_s"),
    bad_cell("csv-metric-zero", "50", "0", "positive number of seconds"),
    rounds("csv-latin1", (HEADER + GOOD_ROWS).encode() + b"a,50,3,2\xe9\n", "not a readable csv"),
    rounds("csv-empty", "", "empty"),
    rounds("csv-no-size", "arm,batch_ready_s\na,1\nb,2\n", "no column size"),
    rounds("csv-no-metric", "arm,size\na,1\nb,2\n", "no metric column"),
    rounds("csv-one-round", HEADER + "a,50,1,2.0\n", "only one round"),
    Case(
        "csv-directory",
        ("analyze", "{tmp}/d"),
        ("is a directory", "not a regular file"),
        {"d/x": "1"},
    ),
    Case("csv-missing", ("analyze", "{tmp}/nope.csv"), ("nope.csv", "no such file")),
    Case(
        "csv-regress-1e308",
        ("regress", "--csv", "{tmp}/r.csv", "--reference", "a", "--candidate", "b"),
        ("r.csv", "from 1e-09 to"),
        {"r.csv": HEADER + GOOD_ROWS + "a,50,3,1e308\nb,50,3,2.0\n"},
    ),
]


def _tree(root: str, tool: str) -> dict[str, str | bytes]:
    base = FIXTURES / tool
    return {
        f"{root}/{p.relative_to(base)}": p.read_bytes()
        for p in base.rglob("*")
        if p.is_file() and not p.name.endswith((".md", ".csv"))
    }


KB = _tree("kb", "kube-burner")
CL2 = _tree("cl2", "clusterloader2")
CL2_ARGS = ("analyze", "--clusterloader2", "{tmp}/cl2")
KB_RUN = next(k for k in KB if "podLatencyMeasurement" in k)


def kube_burner(id: str, arms: tuple[str, ...], *words: str, **changes: str | bytes) -> Case:
    args = ("analyze", "--kube-burner", "{tmp}/kb", *(a for arm in arms for a in ("--arm", arm)))
    return Case(id, args, words, {**KB, **changes})


FOLDER_CASES = [
    kube_burner(
        "kb-arm-parent", ("base=../elsewhere/*", "q=qps3/*"), "--arm", "leaves the data directory"
    ),
    kube_burner("kb-arm-absolute", ("base=/etc/*", "q=qps3/*"), "leaves the data directory"),
    kube_burner("kb-arm-home", ("base=~/x/*", "q=qps3/*"), "leaves the data directory"),
    kube_burner("kb-arm-no-equals", ("baseline/*", "q=qps3/*"), "not name=glob"),
    kube_burner("kb-arm-one", ("base=baseline/*",), "at least two"),
    kube_burner("kb-arm-twice", ("a=baseline/*", "a=qps3/*"), "given twice"),
    kube_burner("kb-arm-nothing", ("a=baseline/*", "b=nomatch/*"), "matches no directory"),
    kube_burner("kb-arm-overlap", ("a=*/*", "b=qps3/*"), "matches both"),
    kube_burner(
        "kb-deep-json",
        ("a=baseline/*", "b=qps3/*"),
        "podlatencymeasurement",
        "nested too deeply",
        **{KB_RUN: deep_list(100_000)},
    ),
    kube_burner(
        "kb-not-json", ("a=baseline/*", "b=qps3/*"), "not json", **{KB_RUN: "{ this is not"}
    ),
    kube_burner(
        "kb-latin1", ("a=baseline/*", "b=qps3/*"), "cannot read", **{KB_RUN: b"[\xff\xfe]"}
    ),
    Case(
        "kb-missing-dir",
        ("analyze", "--kube-burner", "{tmp}/nope", "--arm", "a=x", "--arm", "b=y"),
        ("nope", "no such directory"),
    ),
    Case(
        "cl2-arm-parent",
        (
            "analyze",
            "--clusterloader2",
            "{tmp}/cl2",
            "--size",
            "100",
            "--arm",
            "a=../*",
            "--arm",
            "b=qps3-*",
        ),
        ("leaves the data directory",),
        CL2,
    ),
    Case(
        "cl2-size-zero",
        (
            "analyze",
            "--clusterloader2",
            "{tmp}/cl2",
            "--size",
            "0",
            "--arm",
            "a=baseline-*",
            "--arm",
            "b=qps3-*",
        ),
        ("--size", "between 1 and 10000"),
        CL2,
    ),
]

PLAN = ("plan", "--playbook", "lab-sweep", "--profile", "lab")


def flag(id: str, args: tuple[str, ...], *words: str, base: tuple[str, ...] = PLAN) -> Case:
    return Case(id, (*base, *args), words)


REGRESS = ("regress", "--csv", "{tmp}/r.csv", "--reference", "a", "--candidate", "b")
BATCH = ("batch", "--profile", "lab")
FLAG_CASES = [
    flag("flag-qps-nan", ("--qps", "nan"), "--qps", "finite"),
    flag("flag-qps-inf", ("--qps", "inf"), "--qps", "finite"),
    flag("flag-qps-negative", ("--qps", "-1"), "--qps", "between"),
    flag("flag-qps-zero", ("--qps", "0"), "--qps", "between"),
    flag("flag-qps-huge", ("--qps", "1e300"), "--qps", "between"),
    flag("flag-rounds-million", ("--rounds", "1000000"), "--rounds", "between 1 and 1000"),
    flag("flag-rounds-zero", ("--rounds", "0"), "--rounds", "between"),
    flag("flag-seed-1e30", ("--seed", str(10**30)), "--seed", "between 0 and"),
    flag("flag-seed-negative", ("--seed", "-1"), "--seed", "between 0"),
    flag("flag-sizes-billion", ("--sizes", "1000000000"), "--sizes", "between 1 and 10000"),
    flag("flag-sizes-zero", ("--sizes", "10,0"), "--sizes", "between"),
    flag("flag-sizes-words", ("--sizes", "a,b"), "--sizes", "invalid sizes"),
    flag("flag-sizes-many", ("--sizes", ",".join(map(str, range(1, 60)))), "more than 50"),
    flag("flag-concurrency-zero", ("--concurrency", "0"), "--concurrency", "between"),
    flag("flag-namespace-semicolon", ("--namespace", "a;b"), "--namespace", "invalid namespace"),
    flag("flag-namespace-upper", ("--namespace", "ABC"), "--namespace", "invalid namespace"),
    flag("flag-namespace-long", ("--namespace", "a" * 64), "--namespace", "at most 63"),
    flag("flag-design", ("--design", "nope"), "design"),
    flag("flag-plan-confidence-nan", ("--confidence", "nan"), "--confidence"),
    flag("flag-plan-detect-nan", ("--detect", "nan%"), "--detect"),
    flag("flag-plan-detect-inf", ("--detect", "inf"), "--detect"),
    Case(
        "flag-analyze-confidence-inf",
        ("analyze", "{tmp}/r.csv", "--confidence", "inf"),
        ("--confidence",),
        {"r.csv": HEADER + GOOD_ROWS},
    ),
    Case(
        "flag-analyze-baseline-unknown",
        ("analyze", "{tmp}/r.csv", "--baseline", "nosuch"),
        ("nosuch",),
        {"r.csv": HEADER + GOOD_ROWS},
    ),
    flag("flag-catalog-unknown", ("--catalog", "nosuch"), "unknown catalog"),
    flag("flag-factor-unknown", ("NoSuchFactor",), "unknown factor"),
    flag("flag-batch-pods-zero", ("--pods", "0"), "--pods", "between", base=BATCH),
    flag("flag-batch-pods-huge", ("--pods", "1000000"), "--pods", "between", base=BATCH),
    flag("flag-batch-timeout-nan", ("--pods", "5", "--timeout", "nan"), "--timeout", base=BATCH),
    flag("flag-batch-observe-inf", ("--pods", "5", "--observe", "inf"), "--observe", base=BATCH),
    flag("flag-batch-qps-nan", ("--pods", "5", "--qps", "nan"), "--qps", "finite", base=BATCH),
    flag(
        "flag-batch-namespace",
        ("--pods", "5", "--namespace", "a;b"),
        "--namespace",
        base=BATCH,
    ),
    flag(
        "flag-node-timeout-nan",
        ("--timeout", "nan", "--set", "kubeAPIQPS=5"),
        "--timeout",
        "finite",
        base=("node", "apply", "--profile", "lab"),
    ),
    Case(
        "flag-regress-margin-nan",
        (*REGRESS, "--margin", "nan"),
        ("finite",),
        {"r.csv": HEADER + GOOD_ROWS},
    ),
    Case(
        "flag-regress-rounds-one",
        (*REGRESS, "--rounds", "1"),
        ("--rounds", "between 2"),
        {"r.csv": HEADER + GOOD_ROWS},
    ),
    Case(
        "flag-regress-seed",
        (*REGRESS, "--seed", str(2**64)),
        ("--seed", "between"),
        {"r.csv": HEADER + GOOD_ROWS},
    ),
    Case(
        "flag-profile-empty",
        ("plan", "--playbook", "lab-sweep", "--profile", ""),
        ("--profile", "empty"),
    ),
    Case(
        "flag-playbook-unknown",
        ("plan", "--playbook", "nosuch", "--profile", "lab"),
        ("unknown playbook",),
    ),
]

NODE_SHOW = ("node", "show", "--profile", "{tmp}/n.yaml")


def ssh_config(id: str, config: str | bytes, *words: str, host: str = "n1") -> Case:
    profile = PROFILE.replace("  host: n1.example\n", f"  host: {host}\n  config: {{tmp}}/ssh\n")
    return Case(
        id,
        NODE_SHOW,
        words,
        {"n.yaml": profile, "ssh": config},
        untouched=("X",),
    )


SSH_CASES = [
    ssh_config(
        "ssh-hostname-injection",
        "Host n1\n  HostName 127.0.0.1;touch X\n",
        "hostname",
        "invalid host name",
        "ssh config",
    ),
    ssh_config("ssh-hostname-space", "Host n1\n  HostName 'a b'\n", "invalid host name"),
    ssh_config("ssh-user-injection", "Host n1\n  User root;id\n", "user of", "invalid user name"),
    ssh_config("ssh-port-zero", "Host n1\n  Port 0\n", "port of", "between 1 and 65535"),
    ssh_config("ssh-port-70000", "Host n1\n  Port 70000\n", "between 1 and 65535"),
    ssh_config("ssh-port-word", "Host n1\n  Port ssh\n", "port of"),
    ssh_config("ssh-proxy-unknown-token", "Host n1\n  ProxyCommand nc %C\n", "%c", "proxycommand"),
    ssh_config("ssh-latin1", b"Host n1\n  HostName caf\xe9\n", "utf-8"),
    ssh_config("ssh-huge", "#" * 2_100_000, "bytes, more than"),
    Case(
        "ssh-config-missing",
        NODE_SHOW,
        ("ssh.config", "does not exist"),
        {"n.yaml": PROFILE.replace("  agent: false\n", "  agent: false\n  config: /nope/ssh\n")},
    ),
]

KUBE = ("node", "check", "--profile", "lab", "--kubeconfig", "{tmp}/kc")
TOKEN = "SECRETTOKENabcdefghijklmnopqrstuvwxyz0123456789"
KC_GOOD = (
    "apiVersion: v1\ncurrent-context: c\ncontexts:\n- name: c\n  context: {cluster: k, user: u}\n"
    "clusters:\n- name: k\n  cluster: {server: 'https://127.0.0.1:1'}\n"
)


def kubeconfig(id: str, text: str | bytes, *words: str) -> Case:
    return Case(id, KUBE, ("kc", *words), {"kc": text}, absent=(TOKEN,))


KUBECONFIG_CASES = [
    kubeconfig("kc-latin1", KC_GOOD.encode() + b"# caf\xe9\n", "utf-8"),
    kubeconfig("kc-malformed-token", f"users:\n- name: u\n  user: {{token: {TOKEN}\n", "malformed"),
    kubeconfig(
        "kc-malformed-indent", f"apiVersion: v1\n users:\n  - token: {TOKEN}\n", "malformed"
    ),
    kubeconfig("kc-dup-key", KC_GOOD + "current-context: d\n", "given twice"),
    kubeconfig("kc-list", "- a\n- b\n", "mapping"),
    kubeconfig("kc-deep", "x: " + deep_list(10_000) + "\n", "nested"),
    kubeconfig(
        "kc-bad-token-type",
        KC_GOOD + f"users:\n- name: u\n  user: {{token: [{TOKEN}], client-key-data: {TOKEN}}}\n",
        "cannot use context",
    ),
    Case(
        "kc-context-missing",
        (*KUBE, "--context", "nope"),
        ("nope",),
        {"kc": KC_GOOD + "users:\n- name: u\n  user: {}\n"},
    ),
    Case(
        "kc-missing-file",
        ("node", "check", "--profile", "lab", "--kubeconfig", "{tmp}/no"),
        ("no kubeconfig",),
    ),
]

DB_CASES = [
    Case("db-directory", ("runs", "--db", "{tmp}/d"), ("--db", "is a directory"), {"d/x": "1"}),
    Case(
        "db-text-file",
        ("runs", "--db", "{tmp}/t.txt"),
        ("--db", "not an sqlite database"),
        {"t.txt": "hello\n"},
    ),
    Case(
        "db-missing-folder",
        ("runs", "--db", "{tmp}/nope/r.sqlite"),
        ("--db", "does not exist"),
        untouched=("nope",),
    ),
    Case(
        "db-under-file",
        ("runs", "--db", "{tmp}/t.txt/r.sqlite"),
        ("--db", "not a folder"),
        {"t.txt": "x"},
    ),
    Case(
        "db-show-text-file",
        ("runs", "show", "x", "--db", "{tmp}/t.txt"),
        ("not an sqlite",),
        {"t.txt": "hello\n"},
    ),
    Case(
        "db-report-directory", ("report", "x", "--db", "{tmp}/d"), ("is a directory",), {"d/x": "1"}
    ),
    Case(
        "out-report-file",
        ("report", "x", "--out", "{tmp}/f"),
        ("--out", "not a folder"),
        {"f": "x"},
    ),
    Case(
        "out-report-under-file",
        ("report", "x", "--out", "{tmp}/f/sub"),
        ("--out", "not a folder"),
        {"f": "x"},
    ),
    Case(
        "out-history-file",
        ("history", "--node", "n1", "--out", "{tmp}/f"),
        ("--out", "not a folder"),
        {"f": "x"},
    ),
    Case(
        "out-export-directory",
        ("runs", "export", "--out", "{tmp}/d"),
        ("--out", "is a directory"),
        {"d/x": "1"},
    ),
    Case(
        "out-export-missing-folder",
        ("runs", "export", "--out", "{tmp}/nope/runs.json"),
        ("--out", "does not exist"),
        untouched=("nope",),
    ),
    Case(
        "db-pool-text-file",
        ("report", "a", "b", "--db", "{tmp}/t.txt"),
        ("--db", "not an sqlite database"),
        {"t.txt": "hello\n"},
    ),
]

# A rounds CSV whose gate verdict is PASS (exit 0): an output that cannot be written is one
# error line after the verdict, and the exit code stays the verdict's
PASS_CSV = "arm,size,block,batch_ready_s,p95_s\n" + "".join(
    f"ref,150,{b},{4.0 * k:.4f},{3.6 * k:.4f}\ncand,150,{b},{4.0 * k * (1 + w):.4f},"
    f"{3.6 * k * (1 + w):.4f}\n"
    for b, (k, w) in enumerate(
        zip(
            [1.0, 1.08, 0.95, 1.03, 0.97, 1.05, 0.99, 1.02],
            [0.004, -0.003, 0.002, -0.004, 0.003, -0.002, 0.001, -0.001],
            strict=True,
        )
    )
)
GATE = ("regress", "--csv", "{tmp}/r.csv", "--reference", "ref", "--candidate", "cand")
OUTPUT_CASES = [
    Case(
        "out-junit-directory",
        (*GATE, "--junit", "{tmp}/d"),
        ("--junit", "is a directory", "verdict above stands"),
        {"r.csv": PASS_CSV, "d/x": "1"},
        code=0,
        stdout_words=("verdict: PASS",),
    ),
    Case(
        "out-summary-missing-folder",
        (*GATE, "--summary", "{tmp}/missing/dir/x.md"),
        ("--summary", "does not exist", "exit 0"),
        {"r.csv": PASS_CSV},
        code=0,
        stdout_words=("verdict: PASS",),
        untouched=("missing",),
    ),
    Case(
        "out-json-junit-directory",
        (*GATE, "--json", "--junit", "{tmp}/d"),
        ("--junit",),
        {"r.csv": PASS_CSV, "d/x": "1"},
        code=0,
        stdout_words=('"verdict": "PASS"',),
    ),
]

ALL = CSV_CASES + FOLDER_CASES + FLAG_CASES + SSH_CASES + KUBECONFIG_CASES + DB_CASES
ALL += OUTPUT_CASES


@pytest.mark.timeout(120)
@pytest.mark.parametrize("case", ALL, ids=ids(ALL))
def test_bad_input(case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_case(case, tmp_path, capsys)
