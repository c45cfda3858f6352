"""Every command the docs show works on the installed package, not only in a checkout: the wheel
is built, installed into a fresh venv in tmp, and each `abtest ...` command line of README.md and
docs/*.md that needs no lab is run from a folder outside the repository. None may end in an
"unknown ..." (a catalog, playbook, profile or patch series the wheel does not carry) or a
traceback: each exits 0, or with one clean error line.

The venv is made with `python -m venv` and the wheel installed with ``--no-deps``; the project
venv's site-packages are put on its path by a .pth line (its editable-install hook is not run
from there, so ``import abtest`` is the wheel's, which the test checks). The commands run in one
process of that venv (RUNNER), one start-up for all. Measured on the 2-core machine while other
work kept its load average at 14: 23 s for the wheel and the venv, 61 s in all, 25 s of CPU; so
it stays in the fast tier (the ``lab`` marker is for tests over ~60 s on an idle machine, as the
clean-venv install with every dependency in test_packaging, ~250 s).

What is run, by one explicit rule per line (``plan_of``):
- RUN: a command that needs no node (gates --list, plan, regress --plan, analyze, runs,
  history, report): run as shown.
- ABSENT: a command that measures on a node (a sweep, bisect, regress, batch): run as shown but
  on a stand-in profile whose node is absent (SSH and API server on a loopback port nothing
  listens on, ``--profile`` replaced or added), so everything up to the node is the installed
  package's (names, series, playbooks, catalogs, plans) and it ends at the node, exit 4.
- HELP: a synopsis (placeholders such as ``P``, ``RUN_ID``, ``[--json]``, ``a|b``, ``...``) or a
  command of the lab or of a node (``lab ...``, ``node ...``): ``--help`` of each subcommand.
- SKIP (listed in SKIPPED with the reason): not an abtest command, a run id of the author's
  database, a release range (listed from the Go module proxy, the network).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import time
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import typer

from abtest.cli.main import app

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```", re.S | re.M)
SHELL = {"sh", "bash", "shell", "console"}
# what the wheel is made of (pyproject.toml's packages, package-dir and readme)
SOURCES = ("pyproject.toml", "README.md", "abtest", "gates", "playbooks", "kubelet-patches")
PLACEHOLDER = re.compile(r"[A-Z][A-Z0-9_]*(\.[a-z]+)?(=[A-Z][A-Z0-9_]*)?")
RUN_ID = re.compile(r"\b\d{8}-\d{6}-[0-9a-f]{6}\b")
# commands that measure on a node: run on the absent stand-in node; the rest never reach one
MEASURES = {"gates", "bisect", "regress", "batch"}
# ... unless they only list, plan, or gate rounds from files or stored runs
OFFLINE = {"--list", "--plan", "--csv", "--kube-burner", "--clusterloader2", "--reference-run"}

# the lines the rule skips, with why (the test checks this list is exactly what it skipped)
SKIPPED = {
    "scripts/quickstart": "not an abtest command (the repository's own script)",
    "scripts/test": "not an abtest command (the repository's own script)",
    "export ABTEST_DB=postgresql://abtest:PASSWORD@db.example:5432/abtest": "not an abtest "
    "command (a shell setting)",
    "abtest report 20261204-175350-242bf0": "a run id of the author's database",
    "abtest bisect --good v1.34.4 --bad v1.36.3 --profile lab --playbook lab-bisect --size 150 "
    "--margin 1": "a release range: the releases are listed by the Go module proxy (network)",
}


@dataclass(frozen=True)
class Step:
    doc: str
    line: str
    kind: str  # RUN, ABSENT, HELP or SKIP
    argv: tuple[tuple[str, ...], ...] = ()  # what is run (after `abtest`)


def command_lines(text: str) -> list[str]:
    """Each logical line of a ```sh block, and each line of another fenced block that starts
    with `abtest ` (its command column: a table's description follows 3+ spaces); a comment
    dropped, `a && b` two commands, `sudo` dropped."""
    found = []
    for info, block in FENCE.findall(text):
        shell = info.strip() in SHELL
        for raw in block.replace("\\\n", " ").splitlines():
            line = raw.strip()
            if not line or line.startswith("#"):
                continue
            if not shell:
                if not line.startswith("abtest "):
                    continue
                line = re.split(r"\s{3,}", line)[0]
            line = re.split(r"\s+#\s", line)[0].strip()
            for part in line.split("&&"):
                part = " ".join(part.split())
                found.append(part.removeprefix("sudo "))
    return found


@cache
def _root() -> Any:
    return typer.main.get_command(app)


def _subcommands(words: list[str]) -> list[tuple[str, ...]]:
    """The subcommand paths a line names (``node check|show``: both), as the CLI has them."""
    paths: list[tuple[str, ...]] = [()]
    command = _root()
    for word in words:
        names = word.split("|")
        if not hasattr(command, "commands") or any(n not in command.commands for n in names):
            break
        paths = [(*p, n) for p in paths for n in names]
        command = command.commands[names[0]]
    return paths


def _synopsis(words: list[str], line: str) -> bool:
    """A line with a placeholder (``P``, ``RUN_ID``, ``NAME=GLOB``), an optional or a choice
    (``[--json]``, ``md|html``), ``...`` or two forms (``a / b``): a synopsis, not a command."""
    values = [w.split("=", 1)[-1] if w.startswith("-") else w for w in words]
    return (
        any(c in line for c in "[|")
        or "..." in line
        or " / " in line
        or any(PLACEHOLDER.fullmatch(v) for v in values)
    )


def plan_of(doc: str, line: str, profile: str) -> Step:
    """The rule of the module docstring, for one command line."""
    if line in SKIPPED:
        return Step(doc, line, "SKIP")
    if not line.startswith("abtest"):
        raise AssertionError(f"{doc}: {line!r} is no abtest command and not in SKIPPED")
    words = line.split()[1:]
    subcommands = _subcommands(words)
    if _synopsis(words, line) or (words and words[0] in {"lab", "node"}):
        return Step(doc, line, "HELP", tuple((*s, "--help") for s in subcommands))
    argv = shlex.split(line)[1:]
    if RUN_ID.search(line) or (words[0] == "bisect" and "--good" in words and "+" not in line):
        raise AssertionError(f"{doc}: {line!r} must be skipped: add it to SKIPPED")
    if words[0] in MEASURES and not OFFLINE & set(words):
        kept: list[str] = []
        rest = iter(argv)
        for word in rest:
            if word == "--profile":
                next(rest)
            else:
                kept.append(word)
        return Step(doc, line, "ABSENT", ((*kept, "--profile", profile),))
    return Step(doc, line, "RUN", (tuple(argv),))


def all_steps(profile: str) -> list[Step]:
    return [
        plan_of(str(doc.relative_to(ROOT)), line, profile)
        for doc in DOCS
        for line in command_lines(doc.read_text())
    ]


def test_the_rule_runs_what_needs_no_lab_and_skips_only_what_it_lists() -> None:
    steps = all_steps("STANDIN.yaml")
    assert {s.line for s in steps if s.kind == "SKIP"} == set(SKIPPED)
    kinds = {s.line: s for s in steps}
    first = kinds["abtest bisect --good v1.36.3 --bad v1.36.3+bisect-demo --profile lab "
                  "--playbook lab-regression"]  # fmt: skip
    assert first.kind == "ABSENT" and first.argv[0][-2:] == ("--profile", "STANDIN.yaml")
    assert kinds["abtest lab up [--kubernetes V] [--nodes N]"].argv == (("lab", "up", "--help"),)
    assert kinds["abtest node check|show --profile P"].argv == (
        ("node", "check", "--help"),
        ("node", "show", "--help"),
    )
    # nothing run as shown reaches a node: the lab's profile only where a plan is made
    for step in steps:
        if step.kind == "RUN" and "lab" in step.argv[0]:
            assert step.argv[0][0] == "plan" or "--plan" in step.argv[0], step.line
    assert sum(s.kind in ("RUN", "ABSENT") for s in steps) >= 15


STANDIN = """\
profile: absent-node
node_name: absent-node
kubeconfig: {tmp}/kubeconfig
ssh:
  host: 127.0.0.1
  port: {port}
  agent: false
  known_hosts: {tmp}/known_hosts
kubelet:
  config_path: /var/lib/kubelet/config.yaml
  binary_path: /usr/bin/kubelet
  builds_dir: /opt/kubelets
"""
KUBECONFIG = """\
apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "https://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: c, context: {{cluster: c, user: u}}}}]
current-context: c
"""


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released: refused when dialled)."""
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _install(tmp: Path) -> Path:
    """The wheel of this checkout in a fresh venv; its python. Built from a copy of what the
    wheel is made of: pip builds in the source tree, and a build/ left in the checkout would
    put files deleted since into later wheels."""
    source = tmp / "source"
    caches = shutil.ignore_patterns("__pycache__")
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, source / name, ignore=caches)
        else:
            source.mkdir(exist_ok=True)
            shutil.copy2(ROOT / name, source / name)
    wheels = tmp / "wheels"
    build = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels)]
    subprocess.run([*build, str(source)], check=True, cwd=tmp, capture_output=True)
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    pip = [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps"]
    subprocess.run([*pip, *map(str, wheels.glob("*.whl"))], check=True, capture_output=True)
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    # the project venv's dependencies (not its editable abtest: a .pth there is not run)
    (Path(purelib) / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    return python


def _env(tmp: Path) -> dict[str, str]:
    keep = {k: v for k, v in os.environ.items() if k in ("PATH", "LANG", "LC_ALL", "TZ")}
    return {
        **keep,
        "HOME": str(tmp / "home"),  # no ~/.kube/config, ~/.ssh/config or cache of the user's
        "ABTEST_DB": str(tmp / "results.sqlite"),
        "KUBECONFIG": str(tmp / "kubeconfig"),
        "COLUMNS": "160",
        "TERM": "dumb",
    }


def _problem(step: Step, argv: tuple[str, ...], done: subprocess.CompletedProcess[str]) -> str:
    """Why this command's outcome is not a working command's, or ''."""
    both = done.stdout + done.stderr
    errors = [x for x in done.stderr.splitlines() if x.startswith("abtest: ")]
    shown = f"{step.doc}: `abtest {shlex.join(argv)}` exit {done.returncode}"
    if "Traceback" in both:
        return f"{shown}: a traceback\n{both[-2000:]}"
    if any(re.search(r"\bunknown\b", e, re.I) for e in errors):
        return f"{shown}: {errors}"
    if done.returncode == 0:
        return "" if step.kind != "ABSENT" else f"{shown}: measured on an absent node?\n{both}"
    if len(errors) != 1 or not done.stderr.rstrip().endswith(errors[0]):
        return f"{shown}: not one clean error line at the end\n{done.stderr[-2000:]}"
    if step.kind == "HELP" or (step.kind == "RUN" and done.returncode != 2):
        return f"{shown}: {errors[0]}"
    if step.kind == "ABSENT" and done.returncode not in (2, 4):
        return f"{shown}: {errors[0]}"
    return ""


# Runs each command through the installed entry point (abtest.cli.main:main, what the console
# script calls) in one process of the venv, from the folder it is started in: one start-up
# for all of them instead of ~1-2 s each. A command's traceback is kept as its stderr.
RUNNER = """
import contextlib, io, json, sys, traceback
from abtest.cli.main import main
given, answers = sys.argv[1:3]
results = []
for argv in json.load(open(given)):
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        sys.argv = ["abtest", *argv]
        try:
            main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
    results.append([code, out.getvalue(), err.getvalue()])
json.dump(results, open(answers, "w"))
"""


@pytest.mark.timeout(600)
def test_every_command_the_docs_show_works_on_the_installed_wheel(tmp_path: Path) -> None:
    started = time.monotonic()
    python = _install(tmp_path)
    port = _closed_port()
    standin = tmp_path / "absent-node.yaml"
    standin.write_text(STANDIN.format(tmp=tmp_path, port=port))
    (tmp_path / "kubeconfig").write_text(KUBECONFIG.format(port=port))
    (tmp_path / "home").mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = _env(tmp_path)

    def run(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            list(argv), cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300,
            stdin=subprocess.DEVNULL,
        )  # fmt: skip

    where = run(str(python), "-c", "import abtest; print(abtest.__file__)").stdout
    assert where.startswith(str(tmp_path / "venv")), where  # the wheel answers, not the checkout
    # the console script itself, once: the docs' first bisection reaches the (absent) node
    script = run(str(python.parent / "abtest"), "bisect", "--good", "v1.36.3", "--bad",
                 "v1.36.3+bisect-demo", "--profile", str(standin))  # fmt: skip
    assert script.returncode == 4 and "bisect-demo" in script.stderr, script.stderr
    installed = time.monotonic() - started
    steps = [(step, argv) for step in all_steps(str(standin)) for argv in step.argv]
    unique = list(dict.fromkeys(argv for _, argv in steps))  # a synopsis in two documents
    (tmp_path / "argv.json").write_text(json.dumps(unique))
    runner = run(str(python), "-c", RUNNER, str(tmp_path / "argv.json"), str(tmp_path / "out"))
    assert runner.returncode == 0, runner.stderr
    results = dict(zip(unique, json.loads((tmp_path / "out").read_text()), strict=True))
    problems = []
    for step, argv in steps:
        code, out, err = results[argv]
        problems.append(_problem(step, argv, subprocess.CompletedProcess(argv, code, out, err)))
    problems = [p for p in problems if p]
    assert not problems, "\n\n".join(problems)
    took = time.monotonic() - started
    print(f"installed in {installed:.0f} s; {len(unique)} commands, {took:.0f} s in all")
