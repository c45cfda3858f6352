"""The first `lab up` build shows progress per binary and says what it built and where.

A fake `go` on PATH stands in for the toolchain (the real build takes ~15 minutes and is
exercised by every fresh `lab up`): it answers the same commands binaries.py runs and writes
the output files, taking a moment per build.
"""

from __future__ import annotations

import io
import json
import os
import sys
from pathlib import Path

import pytest

from abtest.errors import LabError
from abtest.lab import binaries, build_progress

FAKE_GO = r"""#!/usr/bin/env bash
set -euo pipefail
case "$1" in
  mod)  # go mod download -json k8s.io/kubernetes@v
        printf 'module k8s.io/kubernetes\nreplace (\n' > "$PWD/upstream.mod"
        printf '\tk8s.io/api => ./staging/src/k8s.io/api\n)\n' >> "$PWD/upstream.mod"
        printf '{"Path": "k8s.io/kubernetes", "GoMod": "%s"}\n' "$PWD/upstream.mod" ;;
  get)  echo "go: downloading $2" >&2; : > go.sum ;;
  build)
        out=""; while (($#)); do [[ $1 == -o ]] && out=$2; shift; done
        sleep "${FAKE_GO_BUILD_S:-0.6}"
        printf '#!/bin/sh\n' > "$out"; chmod +x "$out" ;;
  *) echo "fake go: unexpected $*" >&2; exit 2 ;;
esac
"""


@pytest.fixture()
def fake_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bindir = tmp_path / "fakebin"
    bindir.mkdir()
    go = bindir / "go"
    go.write_text(FAKE_GO)
    go.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("ABTEST_CACHE", str(tmp_path / "cache"))
    return go


def test_plain_progress_lines_and_summary(fake_go: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(build_progress, "PLAIN_EVERY_S", 0.2)
    monkeypatch.setattr(build_progress, "POLL_S", 0.05)
    lines: list[str] = []
    bins = binaries.ensure_binaries(lines.append, live=False)
    assert bins.missing() == []
    text = "\n".join(lines)
    assert "in all (9 steps), estimated from the 2-core lab's build" in text
    steps = ("modules", *binaries.KUBE_COMMANDS, "etcd", "crictl", "containerd", "toxiproxy-server")
    for name in steps:
        assert f"  {name} ... (usually ~" in text
        assert f"  {name} done in " in text
    # A step that takes longer than the line period says so while it runs.
    assert "still building kube-apiserver:" in text and "left in all" in text
    # The end: what was built, per-step times, and where it is cached.
    assert lines[-3].startswith("  toxiproxy-server")
    assert any(line.startswith("built kube-apiserver, ") for line in lines)
    assert f"cached in {bins.directory.parent} (" in text
    times = json.loads((binaries.cache_root() / "build-times.json").read_text())
    assert set(times) == set(steps)


def test_second_estimate_comes_from_this_machine(fake_go: Path) -> None:
    binaries.ensure_binaries(lambda _line: None, live=False)
    (binaries.binary_set().path("kubelet")).unlink()
    lines: list[str] = []
    binaries.ensure_binaries(lines.append, live=False)
    assert "estimated from this machine's last build" in "\n".join(lines)
    # Modules are in place already: only the missing binary is a step.
    assert "(1 steps)" in lines[1] and "  kubelet ... (usually ~" in lines[2]


def test_live_display_on_a_terminal(fake_go: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    screen = io.StringIO()
    monkeypatch.setattr(sys, "stdout", screen)
    monkeypatch.setenv("FAKE_GO_BUILD_S", "0.1")
    lines: list[str] = []
    binaries.ensure_binaries(lines.append, live=True)
    drawn = screen.getvalue()
    assert "kube-apiserver" in drawn and "done in" in drawn and "left" in drawn
    assert any(line.startswith("cached in ") for line in lines)


def test_a_failed_build_names_the_command_and_the_output(
    fake_go: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_go.write_text("#!/bin/sh\necho 'cannot find module' >&2\nexit 1\n")
    with pytest.raises(LabError, match="cannot find module"):
        binaries.ensure_binaries(lambda _line: None, live=False)
