"""What .ci/run relies on from the scripts it runs before the whole venv exists."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# a package's import name where it differs from its name on PyPI
IMPORT_NAMES = {"PyYAML": "yaml"}

# Runs scripts/prefetch-builds' imports (not its main) with every module outside the standard
# library, abtest and the allowed ones refused, as a venv holding only those would.
_PROBE = """
import importlib.abc, runpy, sys
allowed = set(sys.argv[1].split(","))
class Refuse(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in allowed or top.startswith("_"):
            return None
        if top == "abtest":
            return None
        raise ImportError(f"{name} is not in the build-only venv")
sys.meta_path.insert(0, Refuse())
runpy.run_path(sys.argv[2], run_name="not_main")
print("imports ok")
"""


def _build_only_packages() -> list[str]:
    text = (ROOT / "scripts" / "bootstrap").read_text(encoding="utf-8")
    found = re.search(r"^BUILD_ONLY=\(([^)]*)\)", text, re.M)
    assert found, "scripts/bootstrap no longer names its BUILD_ONLY packages"
    return found.group(1).split()


def test_the_lab_build_imports_only_what_the_build_only_venv_installs() -> None:
    """.ci/run starts `prefetch-builds --lab` from a venv made by `bootstrap --build-only`:
    an import added to the build's path without adding its package there would fail CI's
    first step on a new machine, and only there."""
    allowed = [IMPORT_NAMES.get(p, p) for p in _build_only_packages()]
    assert allowed, "BUILD_ONLY is empty"
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, ",".join(allowed), str(ROOT / "scripts/prefetch-builds")],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert "imports ok" in result.stdout


def test_the_probe_refuses_a_package_left_out() -> None:
    """The check above could pass by refusing nothing: without PyYAML it must fail."""
    result = subprocess.run(
        [sys.executable, "-c", _PROBE, "rich", str(ROOT / "scripts/prefetch-builds")],
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    assert "yaml is not in the build-only venv" in result.stderr


def _lint_function() -> str:
    text = (ROOT / "scripts" / "test").read_text(encoding="utf-8")
    found = re.search(r"^lint\(\) \{\n.*?^\}\n", text, re.M | re.S)
    assert found, "scripts/test no longer defines lint()"
    return found.group(0)


def _run_timed_lint(tmp_path: Path, failing: str) -> subprocess.CompletedProcess[str]:
    """scripts/test's lint() under `timed`, as the full tier calls it, with each tool a stub
    that exits 0 but `failing`, which exits 3."""
    bin_dir = tmp_path / ".venv" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in ("ruff", "mypy", "lint-imports"):
        stub = bin_dir / tool
        stub.write_text(f"#!/bin/sh\nexit {3 if tool == failing else 0}\n", encoding="utf-8")
        stub.chmod(0o755)
    script = (
        "set -euo pipefail\n"
        f"source {ROOT / 'scripts' / 'times.sh'}\n"
        f"{_lint_function()}"
        'timed "lint and types" lint\n'
    )
    return subprocess.run(["bash", "-c", script], cwd=tmp_path, capture_output=True, text=True)


def test_the_full_tier_lint_step_fails_when_any_of_its_tools_fails(tmp_path: Path) -> None:
    # mypy, not the last tool, is the one whose failure `timed`'s `|| rc=$?` once hid
    for tool in ("ruff", "mypy", "lint-imports"):
        run = _run_timed_lint(tmp_path / tool, failing=tool)
        assert run.returncode != 0, f"lint passed with {tool} failing: {run.stderr}"
    assert _run_timed_lint(tmp_path / "none", failing="").returncode == 0
