"""A run in the results store: its id, the environment it ran in, and how it ended.

``new_run`` / ``finish_run`` are shared by `abtest batch` and the sweep; ``probe_environment``
records what every result depends on (node, kernel, versions, size, tool version, git revision).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import secrets
import socket
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from abtest.cluster.client import Cluster
from abtest.cluster.environment import node_facts, server_version
from abtest.config.locations import redact_argv
from abtest.config.playbook import NodeProfile, Playbook
from abtest.errors import AbtestError, StoreConflict
from abtest.process.version import __version__
from abtest.store.db import Store
from abtest.store.tables import now_iso

REPO = Path(__file__).resolve().parents[2]


def git_revision(where: Path = REPO) -> dict[str, Any] | None:
    """The checkout's commit and whether the work tree differs from it; None outside git."""
    if not (where / ".git").exists():
        return None
    try:
        rev = subprocess.run(
            ["git", "-C", str(where), "rev-parse", "HEAD"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
        dirty = subprocess.run(
            ["git", "-C", str(where), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": rev, "dirty": bool(dirty)}


def probe_environment(cluster: Cluster, node_name: str) -> dict[str, Any]:
    """The environment of a run, for runs.env_json. A part that cannot be read says why."""
    env: dict[str, Any] = {
        "tool_version": __version__,
        "git": git_revision(),
        "python": sys.version.split()[0],
        "client_host": socket.gethostname(),
        "client_platform": platform.platform(),
        "client_cpus": os.cpu_count(),
        "probed_at": now_iso(),
    }
    try:
        env["node"] = node_facts(cluster, node_name)
    except AbtestError as exc:
        env["node"] = {"node_name": node_name, "error": str(exc)}
    try:
        env["api_server"] = server_version(cluster)
    except AbtestError as exc:
        env["api_server"] = {"error": str(exc)}
    return env


def new_run_id() -> str:
    """Sortable, unique, and a valid label value: 20251129-101500-1a2b3c."""
    return f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"


def new_run(
    store: Store,
    kind: str,
    *,
    command: str | None = None,
    profile: NodeProfile | None = None,
    node_name: str | None = None,
    playbook: Playbook | None = None,
    env: dict[str, Any] | None = None,
    plan: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> str:
    """Insert a run (status ``running``) and return its id. Several controllers may share
    one database: a generated id that another one took first is drawn again (the primary key
    decides, not luck), so run ids never collide."""
    text = playbook.text if playbook else None
    row = {
        "kind": kind,
        "status": "running",
        # never a --db password (abtest.config.locations): the runs table is shared and exported
        "command": command if command is not None else " ".join(redact_argv(sys.argv)),
        "profile_name": profile.name if profile else None,
        "node_name": node_name or (profile.node_name if profile else None),
        "playbook_name": playbook.name if playbook else None,
        "playbook_text": text,
        "playbook_sha256": hashlib.sha256(text.encode()).hexdigest() if text else None,
        "catalog_name": playbook.catalog if playbook else None,
        "design": playbook.design if playbook else None,
        "seed": playbook.seed if playbook else None,
        "plan_json": json.dumps(plan, sort_keys=True, default=str) if plan else None,
        "env_json": json.dumps(env, sort_keys=True, default=str) if env else None,
    }
    for _ in range(8):
        chosen = run_id or new_run_id()
        try:
            store.runs.add(chosen, row)
        except StoreConflict:
            if run_id is not None:
                raise
            continue
        return chosen
    raise StoreConflict("8 generated run ids in a row were taken: is the clock stuck?")


def finish_run(
    store: Store, run_id: str, status: str = "finished", stop_reason: str | None = None
) -> None:
    store.runs.finish(run_id, status, stop_reason)
