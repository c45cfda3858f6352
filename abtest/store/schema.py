"""The one versioned schema of the results database.

MIGRATIONS[i] takes a database from version i to i+1. A database newer than this code
knows is refused (never guessed at), like asv's versioned result files.
"""

from __future__ import annotations

MIGRATIONS: list[str] = [
    # v0 -> v1
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,                 -- batch | sweep | regress
        created_at TEXT NOT NULL,
        finished_at TEXT,
        status TEXT NOT NULL,               -- running | finished | interrupted | failed
        stop_reason TEXT,
        command TEXT,
        profile_name TEXT,
        node_name TEXT,
        playbook_name TEXT,
        playbook_text TEXT,
        playbook_sha256 TEXT,
        catalog_name TEXT,
        design TEXT,
        seed INTEGER,
        plan_json TEXT,                     -- schedule and options, to resume exactly
        env_json TEXT                       -- node, kernel, versions, tool version, git rev
    );
    CREATE TABLE arms (
        run_id TEXT NOT NULL REFERENCES runs(id),
        name TEXT NOT NULL,
        on_json TEXT NOT NULL,              -- factors on in this arm
        settings_json TEXT NOT NULL,        -- path -> value applied for this arm
        status TEXT NOT NULL DEFAULT 'ok',  -- ok | failed
        failure TEXT,
        PRIMARY KEY (run_id, name)
    );
    CREATE TABLE visits (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id),
        node_name TEXT NOT NULL,
        block INTEGER NOT NULL,
        position INTEGER NOT NULL,
        arm TEXT NOT NULL,
        started_at TEXT NOT NULL,
        finished_at TEXT,
        applied INTEGER NOT NULL DEFAULT 0,
        restart_to_healthz_s REAL,
        restart_to_ready_s REAL,
        restart_to_verified_s REAL,
        verified_json TEXT,                 -- gate values read back from configz + metric
        config_sha256 TEXT,
        error TEXT
    );
    CREATE TABLE rounds (
        id INTEGER PRIMARY KEY,
        run_id TEXT NOT NULL REFERENCES runs(id),
        visit_id INTEGER REFERENCES visits(id),
        node_name TEXT NOT NULL,
        block INTEGER,
        arm TEXT NOT NULL,
        size INTEGER NOT NULL,
        ordinal INTEGER NOT NULL,
        warmup INTEGER NOT NULL DEFAULT 0,
        started_wall REAL NOT NULL,         -- unix time of the round's t0
        accepted INTEGER NOT NULL,
        reason TEXT,
        pods_ready INTEGER NOT NULL,
        batch_ready_s REAL,
        p50_s REAL,
        p95_s REAL,
        p99_s REAL,
        mean_s REAL,
        submit_rate REAL,
        restarts INTEGER NOT NULL DEFAULT 0,
        ready_regressions INTEGER NOT NULL DEFAULT 0,
        sandbox_failures INTEGER NOT NULL DEFAULT 0,
        create_failures INTEGER NOT NULL DEFAULT 0,
        create_retries INTEGER NOT NULL DEFAULT 0,
        watch_restarts INTEGER NOT NULL DEFAULT 0,
        watch_relisted INTEGER NOT NULL DEFAULT 0,
        cleanup_s REAL,
        client_cpu_s REAL,
        phases_json TEXT                    -- phase breakdown medians
    );
    CREATE TABLE pods (
        round_id INTEGER NOT NULL REFERENCES rounds(id),
        name TEXT NOT NULL,
        -- seconds since the round's t0 on one monotonic clock (started_wall maps to wall)
        sent_s REAL,
        response_s REAL,
        scheduled_s REAL,
        ready_to_start_s REAL,
        initialized_s REAL,
        containers_ready_s REAL,
        ready_s REAL,
        http_status INTEGER,
        attempts INTEGER NOT NULL DEFAULT 1,
        restarts INTEGER NOT NULL DEFAULT 0,
        ready_regressed INTEGER NOT NULL DEFAULT 0,
        -- the API server's own timestamps (unix seconds) for cross-checks
        server_created REAL,
        server_scheduled REAL,
        server_ready REAL,
        PRIMARY KEY (round_id, name)
    );
    CREATE TABLE events (
        round_id INTEGER NOT NULL REFERENCES rounds(id),
        pod TEXT,
        reason TEXT NOT NULL,
        message TEXT,
        count INTEGER NOT NULL DEFAULT 1
    );
    CREATE TABLE metric_deltas (
        round_id INTEGER NOT NULL REFERENCES rounds(id),
        metric TEXT NOT NULL,
        labels TEXT NOT NULL DEFAULT '',
        delta_sum REAL,
        delta_count REAL
    );
    CREATE TABLE node_journal (
        id INTEGER PRIMARY KEY,
        node_name TEXT NOT NULL,
        profile_name TEXT NOT NULL,
        kind TEXT NOT NULL,                 -- config | binary
        path TEXT NOT NULL,                 -- file on the node
        backup_path TEXT,                   -- byte-for-byte copy kept on the node
        original BLOB,                      -- byte-for-byte copy kept here (config only)
        original_sha256 TEXT NOT NULL,
        applied_json TEXT NOT NULL,
        state TEXT NOT NULL,                -- applying | applied | restored | failed
        detail TEXT,
        created_at TEXT NOT NULL,
        updated_at TEXT NOT NULL
    );
    CREATE INDEX rounds_run ON rounds(run_id);
    CREATE INDEX journal_node ON node_journal(node_name, state);
    """,
    # v1 -> v2: where the time between rounds goes (abtest.batch.round_gaps). The rounds' totals
    # are NULL for rounds stored before v2 (not measured then), never guessed.
    """
    ALTER TABLE rounds ADD COLUMN gap_before_s REAL;   -- previous round returned -> first create
    ALTER TABLE rounds ADD COLUMN gap_after_s REAL;    -- observation over -> node clean
    CREATE TABLE round_gaps (
        round_id INTEGER NOT NULL REFERENCES rounds(id),
        phase TEXT NOT NULL,                -- before | after
        seq INTEGER NOT NULL,               -- order within the phase
        part TEXT NOT NULL,
        seconds REAL NOT NULL,
        summed INTEGER NOT NULL,            -- 1: a lap (laps add up to the phase total)
        PRIMARY KEY (round_id, phase, part)
    );
    """,
    # v2 -> v3: each event's type (Normal | Warning), so a report can name the warnings the
    # kubelet repeats for every pod; NULL for events stored before v3 (not recorded then).
    """
    ALTER TABLE events ADD COLUMN type TEXT;
    """,
    # v3 -> v4: the run that made each journaled change, so a run's base config is found by
    # its id (abtest.store.node_history.base_config); NULL for a change no run made (`abtest node
    # apply`) and for rows stored before v4, which are found by the run's time window.
    """
    ALTER TABLE node_journal ADD COLUMN run_id TEXT;
    CREATE INDEX journal_run ON node_journal(run_id);
    """,
    # v4 -> v5: when the runtime started each pod's last container (CRI started_at, seconds
    # since the round's t0: abtest.batch.runtime_start), which splits the containers phase;
    # NULL for pods stored before v5 and where the node profile cannot list the starts.
    """
    ALTER TABLE pods ADD COLUMN container_started_s REAL;
    """,
]

SCHEMA_VERSION = len(MIGRATIONS)
