"""`abtest runs --json` is JSON only; `abtest runs show RUN` describes one run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from abtest.cli.main import app
from abtest.store.db import Store


def _sweep(store: Store) -> str:
    run_id = "20261130-101010-abcd"
    plan = {"nodes": ["abtest-lab"], "schedule": {"blocks": 3, "sizes": [10, 20]}}
    store.insert(
        "runs",
        {
            "id": run_id,
            "kind": "sweep",
            "created_at": "2026-11-30T10:10:10.000+00:00",
            "status": "interrupted",
            "stop_reason": "SIGTERM",
            "node_name": "abtest-lab",
            "profile_name": "lab",
            "playbook_name": "lab-sweep",
            "design": "gates-all",
            "seed": 7,
            "command": "abtest gates --all --playbook lab-sweep",
            "plan_json": plan,
        },
    )
    for name, settings in (("baseline", {}), ("kubeAPIQPS", {"kubeAPIQPS": 3})):
        store.insert(
            "arms",
            {"run_id": run_id, "name": name, "on_json": [], "settings_json": settings},
        )
    ordinal = 0
    for block in (1, 2):
        for arm in ("baseline", "kubeAPIQPS"):
            for size in (10, 20):
                ordinal += 1
                store.insert(
                    "rounds",
                    {
                        "run_id": run_id,
                        "node_name": "abtest-lab",
                        "block": block,
                        "arm": arm,
                        "size": size,
                        "ordinal": ordinal,
                        "started_wall": 1.0e9 + ordinal,
                        "accepted": not (block == 2 and arm == "kubeAPIQPS" and size == 20),
                        "pods_ready": size,
                        "batch_ready_s": 2.0,
                        "p50_s": None,  # NaN in the frame: must be null in JSON
                    },
                )
    return run_id


@pytest.fixture()
def db(tmp_path: Path) -> tuple[Path, str]:
    path = tmp_path / "r.sqlite"
    with Store(path) as store:
        return path, _sweep(store)


def test_runs_json_is_only_json(db: tuple[Path, str]) -> None:
    path, run_id = db
    result = CliRunner().invoke(app, ["runs", "--json", "--db", str(path)])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)
    assert rows[0]["id"] == run_id and rows[0]["rounds"] == 8 and rows[0]["accepted"] == 7


def test_runs_show_json(
    db: tuple[Path, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, run_id = db
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["runs", "show", run_id, "--json", "--db", str(path)])
    assert result.exit_code == 0, result.output
    d = json.loads(result.stdout)
    assert d["status"] == "interrupted" and d["stop_reason"] == "SIGTERM"
    assert [a["name"] for a in d["arms"]] == ["baseline", "kubeAPIQPS"]
    assert d["arms"][1]["settings"] == {"kubeAPIQPS": 3}
    assert d["sizes"] == [10, 20]
    assert d["blocks_planned"] == 3 and d["blocks_with_rounds"] == 2
    assert {"arm": "kubeAPIQPS", "size": 20, "rounds": 2, "accepted": 1} in d["rounds"]
    assert d["report"]["files"] == [] and d["report"]["render"].startswith("abtest report")

    (tmp_path / "reports" / run_id).mkdir(parents=True)
    (tmp_path / "reports" / run_id / "report.html").write_text("<html></html>")
    shown = CliRunner().invoke(app, ["runs", "show", run_id, "--db", str(path)])
    assert shown.exit_code == 0, shown.output
    assert "report.html" in shown.output and "2 of 3 planned" in shown.output
    assert "kubeAPIQPS=3" in shown.output


def test_runs_show_unknown_run_is_a_user_error(db: tuple[Path, str]) -> None:
    path, _ = db
    result = CliRunner().invoke(app, ["runs", "show", "nope", "--db", str(path)])
    assert result.exit_code != 0
    assert "no run 'nope'" in str(result.exception)


def test_install_completion_is_offered() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert "--install-completion" in result.output
