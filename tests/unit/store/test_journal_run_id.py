"""The node journal names the run that made each change (schema v4): an older database
migrates and keeps its journal, and a run's base kubelet config is found by its run id, by
the run's time window only for rows stored without one."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from abtest.batch.run_record import finish_run, new_run
from abtest.store.db import Store
from abtest.store.journal import Journal
from abtest.store.node_history import base_config
from abtest.store.schema import MIGRATIONS, SCHEMA_VERSION

NODE = "n1"
PATH = "/var/lib/kubelet/config.yaml"


def _begin(store: Store, run_id: str | None, original: bytes, node: str = NODE) -> None:
    Journal(store, run_id=run_id).begin(
        node_name=node, profile_name="p", path=PATH, original=original, applied={}
    )


def test_a_v3_database_migrates_and_keeps_its_journal(tmp_path: Path) -> None:
    path = tmp_path / "v3.sqlite"
    conn = sqlite3.connect(path)
    conn.executescript("".join(MIGRATIONS[:3]) + "\nPRAGMA user_version = 3;")
    conn.execute(
        "INSERT INTO runs (id, kind, created_at, finished_at, status) VALUES "
        "('r1', 'sweep', '2025-01-01T00:00:00.000+00:00', '2025-01-01T01:00:00.000+00:00', "
        "'finished')"
    )
    conn.execute(
        "INSERT INTO node_journal (node_name, profile_name, kind, path, original, "
        "original_sha256, applied_json, state, created_at, updated_at) VALUES "
        "(?, 'p', 'config', ?, ?, 'x', '{}', 'restored', ?, ?)",
        (NODE, PATH, b"found by r1\n", "2025-01-01T00:10:00.000+00:00", "2025-01-01T00:50:00"),
    )
    conn.commit()
    conn.close()
    with Store(path) as store:
        assert store.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION >= 4
        [entry] = Journal(store).history(NODE)
        assert entry.original == b"found by r1\n" and entry.state == "restored"
        assert entry.run_id is None  # stored before v4: no run named
        # found by the run's time window, as before v4
        assert base_config(store, "r1", NODE) == b"found by r1\n"
    with Store(path) as again:  # opening a migrated database again changes nothing
        assert again.query("PRAGMA user_version")[0][0] == SCHEMA_VERSION
        assert len(Journal(again).history(NODE)) == 1


def test_a_run_s_base_config_is_found_by_its_run_id(store: Store) -> None:
    """Two runs on one node at once: the time window of the later one starts before the
    earlier one's change, and would take it; the run id does not."""
    first = new_run(store, "sweep", node_name=NODE)
    second = new_run(store, "sweep", node_name=NODE)
    _begin(store, None, b"abtest node apply\n")  # no run's change, in both windows
    _begin(store, first, b"found by the first\n")
    _begin(store, second, b"found by the second\n")
    _begin(store, second, b"a later change of the second\n")
    _begin(store, second, b"on another node\n", node="n2")
    assert base_config(store, second, NODE) == b"found by the second\n"
    assert base_config(store, first, NODE) == b"found by the first\n"
    assert base_config(store, second, "n2") == b"on another node\n"
    assert [e.run_id for e in Journal(store).history(NODE)] == [second, second, first, None]


def test_without_a_row_of_its_own_only_rows_that_name_no_run_are_in_its_window(
    store: Store,
) -> None:
    other = new_run(store, "sweep", node_name=NODE)
    quiet = new_run(store, "sweep", node_name=NODE)
    _begin(store, other, b"the other run's\n")
    assert base_config(store, quiet, NODE) is None  # another run's change is not this one's
    _begin(store, None, b"an older abtest's, no run named\n")
    finish_run(store, quiet)
    assert base_config(store, quiet, NODE) == b"an older abtest's, no run named\n"
    assert base_config(store, "no-such-run", NODE) is None
