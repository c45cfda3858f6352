"""The README's first command works as written: as root without sudo, or through sudo."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "scripts" / "quickstart"


def AS_NOBODY(setpriv: str) -> list[str]:
    return [setpriv, "--reuid=65534", "--regid=65534", "--clear-groups"]


@pytest.fixture()
def bindir() -> Iterator[Path]:
    path = _bin_without_sudo()
    yield path
    shutil.rmtree(path)


def _bin_without_sudo() -> Path:
    """A PATH with what the script's preamble runs, and no sudo (as on a bare root machine).

    In a directory of its own under /tmp: pytest's tmp_path is private to root, and the
    script also runs as nobody."""
    bindir = Path(tempfile.mkdtemp(prefix="abtest-quickstart-", dir="/tmp"))
    bindir.chmod(0o755)
    for tool in ("bash", "env", "id", "dirname"):
        found = shutil.which(tool)
        assert found, tool
        (bindir / tool).symlink_to(found)
    return bindir


@pytest.mark.skipif(os.geteuid() != 0, reason="checks the root path: the lab machine runs as root")
def test_runs_as_root_without_sudo(bindir: Path) -> None:
    done = subprocess.run(
        [str(bindir / "bash"), str(QUICKSTART), "--check"],
        env={"PATH": str(bindir)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "running as root" in done.stdout


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_a_user_without_sudo_is_told_to_run_it_as_root(bindir: Path) -> None:
    setpriv = shutil.which("setpriv")
    assert setpriv
    done = subprocess.run(
        [*AS_NOBODY(setpriv), str(bindir / "bash"), str(QUICKSTART), "--check"],
        env={"PATH": str(bindir)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1
    assert "sudo is not installed" in done.stderr and "run it as root" in done.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
def test_a_user_with_sudo_goes_through_sudo(bindir: Path) -> None:
    (bindir / "sudo").write_text("#!/bin/sh\nexit 99\n")
    (bindir / "sudo").chmod(0o755)
    setpriv = shutil.which("setpriv")
    assert setpriv
    done = subprocess.run(
        [*AS_NOBODY(setpriv), str(bindir / "bash"), str(QUICKSTART), "--check"],
        env={"PATH": str(bindir)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "through sudo" in done.stdout


def test_readme_first_command_is_the_script_itself() -> None:
    readme = (ROOT / "README.md").read_text()
    first_block = re.search(r"```sh\n(.*?)```", readme, re.S)
    assert first_block
    assert first_block.group(1).strip() == "scripts/quickstart"
    assert "as root" in readme[: first_block.end() + 600]
