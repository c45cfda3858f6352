"""The table the bad-input suites share: one row is a file or flag, the exit code and the words
the one error line must contain. Each row runs the real entry point (``abtest.cli.main.main``,
argv and working folder as a user's shell would give them) in-process, so the suite stays in
the fast tier; only rows that need a second process (a hang) would use a subprocess.

What every row also checks: no traceback, the error is one line on stderr (``abtest: error:``)
naming where (the file or the flag), and nothing named in ``absent`` appears (a secret).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from abtest.cli.main import main

Content = str | bytes


@dataclass(frozen=True)
class Case:
    """``files`` are written under the test's folder (``{tmp}`` in a text or an argument is that
    folder); ``args`` is the command line after ``abtest``."""

    id: str
    args: tuple[str, ...]
    words: tuple[str, ...]
    files: dict[str, Content] = field(default_factory=dict)
    code: int = 2
    absent: tuple[str, ...] = ()
    #: files that must not exist afterwards (a command injection's witness, a created folder)
    untouched: tuple[str, ...] = ()
    #: the exit code is the verdict's and the verdict must be on stdout (regress outputs)
    stdout_words: tuple[str, ...] = ()


@dataclass(frozen=True)
class Outcome:
    code: int
    out: str
    err: str


def invoke(args: list[str], cwd: Path, capsys: pytest.CaptureFixture[str]) -> Outcome:
    """``abtest ARGS`` run from ``cwd`` through the real entry point and its error mapping."""
    old_argv, old_cwd = sys.argv, Path.cwd()
    sys.argv = ["abtest", *args]
    os.chdir(cwd)
    code: int
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = old_argv
        os.chdir(old_cwd)
    captured = capsys.readouterr()
    return Outcome(code, captured.out, captured.err)


def _fill(text: Content, tmp: Path) -> Content:
    return text.replace("{tmp}", str(tmp)) if isinstance(text, str) else text


def run_case(case: Case, tmp: Path, capsys: pytest.CaptureFixture[str]) -> Outcome:
    for name, content in case.files.items():
        path = tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        filled = _fill(content, tmp)
        if isinstance(filled, bytes):
            path.write_bytes(filled)
        else:
            path.write_text(filled, encoding="utf-8")
    args = [str(_fill(a, tmp)) for a in case.args]
    result = invoke(args, tmp, capsys)
    both = result.out + result.err
    assert "Traceback" not in both, both
    assert result.code == case.code, f"exit {result.code}, expected {case.code}:\n{both}"
    if case.stdout_words:
        for word in case.stdout_words:
            assert word in result.out, f"{word!r} not on stdout:\n{result.out}"
    lines = [line for line in result.err.splitlines() if line.startswith("abtest: error:")]
    assert lines, f"no one-line error on stderr:\n{result.err}"
    line = lines[0].lower()
    for word in case.words:
        assert str(_fill(word, tmp)).lower() in line, f"{word!r} not in: {lines[0]}"
    for secret in case.absent:
        assert secret not in both, f"{secret!r} was printed:\n{both}"
    for name in case.untouched:
        assert not (tmp / name).exists(), f"{name} exists: the input was acted on"
    return result


def ids(cases: list[Case]) -> list[str]:
    seen: set[str] = set()
    for case in cases:
        assert case.id not in seen, f"case id {case.id!r} twice"
        seen.add(case.id)
    return [c.id for c in cases]


# --- valid documents the rows change one thing in ----------------------------------------

CATALOG = """\
catalog: t
factors:
  - name: kubeAPIQPS
    kind: config_field
    on: 3
    off: 50
    summary: s
"""

PLAYBOOK = """\
playbook: t
catalog: lab
sizes: [10, 20]
rounds: 3
seed: 1
warmup: false
"""

PROFILE = """\
profile: t
node_name: n1
ssh:
  host: n1.example
  agent: false
kubelet:
  config_path: /var/lib/kubelet/config.yaml
  binary_path: /usr/bin/kubelet
"""


def alias_bomb(levels: int = 9) -> str:
    """YAML anchors nine wide and ``levels`` deep: 9**levels values once expanded."""
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, levels):
        lines.append(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]")
    return "\n".join(lines) + "\n"


def deep_list(depth: int) -> str:
    return "[" * depth + "]" * depth
