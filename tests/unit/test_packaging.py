"""The wheel carries the data: a plain `pip install .` in a clean venv outside the repository
finds the shipped catalogs, playbooks and templates from any directory.

The clean-venv install is marked ``slow``: it needs no cluster, but it builds and installs the
package with every dependency into a new venv (55 s to 250 s here, most of the fast tier's
time), so ``scripts/test --unit`` deselects it and the full tier (``scripts/test``, CI) runs it
with the rest of the unit tier, beside the lab tests rather than in their one-at-a-time line.
The check that every package is listed in pyproject stays in the fast tier."""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_is_listed_in_pyproject() -> None:
    listed = set(
        tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    )
    found = {
        ".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "abtest").rglob("__init__.py")
    }
    assert found <= listed, f"add to [tool.setuptools] packages: {sorted(found - listed)}"


def _setuptools() -> dict[str, Any]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]  # type: ignore[no-any-return]


def shipped_data() -> list[tuple[str, Path]]:
    """The data files the wheel must carry, each with the package it ships in: every file of
    every folder under kubelet-patches/ (a series is its whole folder: series.yaml, patches,
    README), and every YAML file of gates/ and playbooks/ (what the loaders read)."""
    wanted = []
    for package, folder in _setuptools()["package-dir"].items():
        root = ROOT / folder
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(root)
            if not path.is_file() or any(
                p.startswith(".") or p == "__pycache__" for p in rel.parts
            ):
                continue
            if folder == "kubelet-patches" or path.suffix == ".yaml":
                wanted.append((".".join([package, *rel.parent.parts]), path))
    return wanted


def test_every_data_file_is_in_a_listed_package_and_its_package_data() -> None:
    """A new series folder (or playbook folder) that pyproject does not name would be left out
    of the wheel silently: `abtest bisect --bad v1.36.3+bisect-demo` failed on an installed
    package with "unknown patch series" while the checkout worked."""
    config = _setuptools()
    packages, data = set(config["packages"]), config["package-data"]
    missing = []
    for package, path in shipped_data():
        if package not in packages:
            missing.append(
                f"{path.relative_to(ROOT)}: add {package!r} to [tool.setuptools] packages"
            )
        elif not any(fnmatch.fnmatch(path.name, glob) for glob in data.get(package, [])):
            missing.append(
                f"{path.relative_to(ROOT)}: add a glob for it to {package!r}'s package-data"
            )
    assert not missing, "\n".join(missing)
    assert any(p.parent.name == "bisect-demo" for _, p in shipped_data())


@pytest.mark.slow  # not lab-bound: the full tier runs it (see the module docstring)
@pytest.mark.timeout(900)
def test_pip_install_into_clean_venv_works_from_another_directory(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run([*pip, str(ROOT)], check=True, cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = subprocess.run(
        [str(venv / "bin" / "abtest"), "gates", "--list", "--catalog", "lab", "--json"],
        cwd=elsewhere,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert "kubeAPIQPS" in proc.stdout
    # the installed copy, not the checkout, answered
    where = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import abtest.config.datafiles as d; print(d.data_dir('playbooks'))",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert str(venv) in where and (Path(where) / "nodes" / "lab.yaml").is_file()
    assert (Path(where) / "agc-sweep.yaml").is_file()
    series = subprocess.run(
        [
            str(venv / "bin" / "python"),
            "-c",
            "import abtest.config.kubelet_series as k; "
            "s = k.load_series(k.parse_build_name('v1.36.3+agc', 'test')); "
            "print(s.folder, len(s.patches))",
        ],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    shipped = len(list((ROOT / "kubelet-patches" / "agc").glob("*.patch")))
    assert shipped >= 6  # 0001-0006 at least: a series the glob misread would pass below
    assert str(venv) in series[0] and int(series[1]) == shipped  # the shipped series, all patches
