"""The HTML report opened in a real browser (headless Chromium): the tables and the figures are
in the rendered DOM, and a screenshot can be taken. Chromium comes from Debian (`chromium`); when
it is missing the test installs it with apt-get (root), and skips only if that is impossible."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from sweeps import build_sweep

from abtest.app.report import build_model
from abtest.report import build_tables, write_report
from abtest.store.db import Store

CANDIDATES = ("/usr/bin/chromium", "chromium", "chromium-browser", "google-chrome")
QUIET = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
)


def _find() -> str | None:
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def _install() -> str:
    """Try apt-get (again after an update); return why it failed, empty when it worked."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or not shutil.which("apt-get"):
        return "not root, or no apt-get"
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}

    def apt(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["apt-get", *args], capture_output=True, text=True, env=env, timeout=900
        )

    done = apt("install", "-y", "chromium")
    if done.returncode != 0:
        apt("update")
        done = apt("install", "-y", "chromium")
    return "" if done.returncode == 0 else done.stderr.strip()[-300:]


@pytest.fixture(scope="module")
def chromium() -> str:
    found = _find()
    if found:
        return found
    why = _install()
    found = _find()
    if not found:
        pytest.skip(f"headless Chromium is not available and apt-get could not install it: {why}")
    return found


def _run(browser: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [browser, *QUIET, f"--user-data-dir={profile}", *args],
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.mark.timeout(1800)
def test_html_report_renders_in_headless_chromium(
    chromium: str, store: Store, tmp_path: Path
) -> None:
    model = build_model(store, build_sweep(store))
    out = tmp_path / "report"
    write_report(model, out, ["html"])
    url = (out / "report.html").resolve().as_uri()

    done = _run(chromium, tmp_path / "profile", "--dump-dom", url)
    assert done.returncode == 0, done.stderr[-2000:]
    dom = done.stdout
    tables = build_tables(model)
    expected = [
        *tables.per_arm,
        *tables.savings,
        *tables.attribution,
        *tables.more,
        *tables.two_way,
        *tables.time_went,
        tables.acceptance,
        tables.environment,
        *(
            t
            for t in (
                tables.combined,
                tables.excluded,
                tables.stages,
                tables.restarts,
                tables.events,
            )
            if t
        ),
    ]
    assert len(re.findall(r"<table[\s>]", dom)) == len(expected)
    for table in expected:
        assert f'id="{table.key}"' in dom
    assert len(re.findall(r"<svg[\s>]", dom)) == 3
    for key in ("batch-ready-distribution", "reduction-ci", "latency-cdf"):
        assert f'id="fig-{key}"' in dom
    # The figures drew something: paths and text inside the SVGs survived parsing.
    assert dom.count("<path") > 50 and "batch ready time (s)" in dom
    assert "+kubeAPIQPS" in dom and "n = 5 analysed rounds per cell" in dom

    shot = tmp_path / "report.png"
    done = _run(
        chromium,
        tmp_path / "profile",
        "--hide-scrollbars",
        "--window-size=1280,2400",
        f"--screenshot={shot}",
        url,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert shot.stat().st_size > 50_000  # a page with figures, not a blank one
