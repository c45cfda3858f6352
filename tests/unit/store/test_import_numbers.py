"""Issue 44: every number an imported file gives is finite and within its column's type, on
SQLite and PostgreSQL. A 401-digit integer was an OverflowError traceback (``math.isfinite``
cannot take it), 10^20 in a real column without a range an OverflowError from SQLite (a
Python int is bound as a 64-bit integer whatever the column), ``1e400`` in a plan or settings
(read as infinity) was stored, a lone surrogate in a text a UnicodeEncodeError. Each is now one
line naming the file, the record (its JSON path) and the field (then what a refused row leaves
unresolved, as for any refused row), exit 2, nothing stored; a
large finite number a real column takes is stored as the double it is. The other files that
carry numbers (kube-burner, clusterloader2, a playbook) refuse the same numbers."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from bad_input import PLAYBOOK, Case, invoke, run_case
from history_store import add_runs

from abtest.store.db import Store
from abtest.store.transfer import export_runs

BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
BIG = "1" * 401  # a JSON integer literal of 401 digits
R0 = "runs[0].rounds[0]"
RUN = "runs[0].run"


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> str:
    """A good export (one run, its rounds, pods and a metric delta) as JSON text."""
    folder = tmp_path_factory.mktemp("numbers")
    with Store(folder / "from.sqlite") as store:
        add_runs(store, [5.0], rounds=2)
        store.insert(
            "metric_deltas",
            {"round_id": 1, "metric": "m", "labels": "", "delta_sum": 1.0, "delta_count": 2.0},
        )
        return json.dumps(export_runs(store), default=str)


def _with(source: str, where: str, literal: str) -> str:
    """The export with the value at ``where`` (dotted, as in ``run.seed``) written as the JSON
    ``literal`` itself (json.dumps cannot write 1e400 or 401 digits as a user's file has them)."""
    doc: Any = json.loads(source)
    node = doc["runs"][0]
    *parents, last = where.split(".")
    for part in parents:
        node = node[int(part)] if part.isdigit() else node[part]
    node[last] = "@@VALUE@@"
    return json.dumps(doc).replace('"@@VALUE@@"', literal)


def _location(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "sqlite":
        return str(tmp_path / "t.sqlite")
    return str(request.getfixturevalue("pg_url"))


def _run_count(location: str) -> int:
    with Store(location) as store:
        return int(store.query("SELECT COUNT(*) FROM runs")[0][0])


def _json_text(key: str, literal: str) -> str:
    """A JSON string holding the JSON text ``{"key": literal}`` (a plan, settings)."""
    return json.dumps(json.dumps({key: "@"})).replace('\\"@\\"', literal)


# (id, where, the JSON literal, words of the one error line)
REFUSED = [
    ("real-401-digits", "rounds.0.batch_ready_s", BIG,
     (f"{R0}.batch_ready_s", "finite number", "1.11e+400")),
    ("real-401-digits-no-range", "rounds.0.metric_deltas.0.delta_sum", BIG,
     (f"{R0}.metric_deltas[0].delta_sum", "finite number")),
    ("real-negative-401-digits", "rounds.0.pods.0.ready_s", "-" + BIG,
     (f"{R0}.pods[0].ready_s", "finite number", "-1.11e+400")),
    ("real-1e400", "rounds.0.batch_ready_s", "1e400", (f"{R0}.batch_ready_s", "infinity")),
    ("real-minus-1e400", "rounds.0.metric_deltas.0.delta_count", "-1e400",
     (f"{R0}.metric_deltas[0].delta_count", "infinity")),
    ("real-nan", "rounds.0.p50_s", "NaN", (f"{R0}.p50_s", "finite number", "nan")),
    ("real-10e20-in-a-range", "rounds.0.batch_ready_s", "100000000000000000000",
     (f"{R0}.batch_ready_s", "1e+20 is outside")),
    ("integer-401-digits", "rounds.0.restarts", BIG,
     (f"{R0}.restarts", "1.11e+400 is outside a 64-bit integer")),
    ("integer-10e20", "run.seed", "100000000000000000000", (f"{RUN}.seed", "64-bit")),
    ("integer-2e63", "rounds.0.pods.0.attempts", str(2**63), (f"{R0}.pods[0].attempts", "64-bit")),
    ("integer-1e400", "rounds.0.size", "1e400", (f"{R0}.size", "must be an integer")),
    ("plan-1e400", "run.plan_json", _json_text("margin_pct", "1e400"),
     (f"{RUN}.plan_json", "1e400", "not a finite number")),
    ("plan-401-digits", "run.plan_json", _json_text("size", BIG),
     (f"{RUN}.plan_json", "1.11e+400", "outside 64 bits")),
    ("settings-1e400", "arms.0.settings_json",
     _json_text("kubeAPIQPS", "-1e400"),
     ("runs[0].arms[0].settings_json", "-1e400", "not a finite number")),
    ("verified-10e20", "visits.0.verified_json", _json_text("n", "1" + "0" * 20),
     ("runs[0].visits[0].verified_json", "1e+20", "outside 64 bits")),
    ("phases-nan", "rounds.0.phases_json", _json_text("a", "NaN"),
     (f"{R0}.phases_json", "nan")),
    ("command-lone-surrogate", "run.command", '"abtest \\udcff"',
     (f"{RUN}.command", "'\\udcff' at character 7", "not unicode text")),
    ("playbook-lone-surrogate", "run.playbook_name", '"p\\ud800"',
     (f"{RUN}.playbook_name", "not unicode text")),
    ("event-message-lone-surrogate", "rounds.0.events", '[{"reason": "r", "message": "\\udfff"}]',
     (f"{R0}.events[0].message", "not unicode text")),
]  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("where", "literal", "words"), [c[1:] for c in REFUSED], ids=[c[0] for c in REFUSED]
)
def test_a_number_no_column_holds_is_one_line(
    backend: str,
    where: str,
    literal: str,
    words: tuple[str, ...],
    source: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    location = _location(backend, tmp_path, request)
    case = Case(
        "import",
        ("runs", "import", "bad.json", "--db", location),
        ("bad.json: ", *words),
        files={"bad.json": _with(source, where, literal)},
    )
    result = run_case(case, tmp_path, capsys)
    assert all(line.startswith("abtest: error: bad.json: ") for line in result.err.splitlines())
    assert _run_count(location) == 0, "a refused import stored a run"


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_large_finite_number_in_a_real_column_is_stored_as_a_double(
    backend: str,
    source: str,
    tmp_path: Path,
    request: pytest.FixtureRequest,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """10^20 (and 2^63) in a real column without a range: an OverflowError from SQLite's
    binding before; the double it is now, on both databases, and exported back the same."""
    location = _location(backend, tmp_path, request)
    text = _with(source, "rounds.0.metric_deltas.0.delta_sum", "1" + "0" * 20)
    (tmp_path / "ok.json").write_text(text.replace('"delta_count": 2.0', f'"delta_count": {2**63}'))
    done = invoke(["runs", "import", "ok.json", "--db", location], tmp_path, capsys)
    assert done.code == 0 and "Traceback" not in done.err, done.err
    with Store(location) as store:
        (row,) = store.query("SELECT delta_sum, delta_count FROM metric_deltas")
        assert (row[0], row[1]) == (1e20, float(2**63))
        again = export_runs(store)["runs"][0]["rounds"][0]["metric_deltas"][0]
    assert again["delta_sum"] == 1e20


KB_FILE = (
    "kb/baseline/collected-metrics-7f3c1a52-0b1e-4c55-9d01-2f6d3f0f9a11/"
    "podLatencyMeasurement-batch-start.json"
)
CL2_FILE = "cl2/baseline-1/PodStartupLatency_PodStartupLatency_load_2026-11-30T10:00:41Z.json"


def _fixture_with(tool: str, rel: str, literal: str) -> dict[str, str | bytes]:
    """The fixture tree of ``tool`` under tests/fixtures, the first pod's ready latency
    (kube-burner) or pod_startup's Perc99 (clusterloader2) of ``rel`` written as ``literal``."""
    base = Path(__file__).parents[2] / "fixtures" / tool
    root = rel.split("/", 1)[0]
    files: dict[str, str | bytes] = {
        f"{root}/{p.relative_to(base)}": p.read_text()
        for p in base.rglob("*")
        if p.is_file() and p.suffix == ".json"
    }
    doc = json.loads(str(files[rel]))
    if tool == "kube-burner":
        doc[0]["podReadyLatency"] = "@@VALUE@@"
    else:
        (item,) = [i for i in doc["dataItems"] if i["labels"]["Metric"] == "pod_startup"]
        item["data"]["Perc99"] = "@@VALUE@@"
    files[rel] = json.dumps(doc).replace('"@@VALUE@@"', literal)
    return files


def _file_cases() -> list[Case]:
    kb = ("analyze", "--kube-burner", "{tmp}/kb", "--arm", "baseline=baseline/*",
          "--arm", "q=qps3/*")  # fmt: skip
    cl2 = ("analyze", "--clusterloader2", "{tmp}/cl2", "--arm", "baseline=baseline-*",
           "--arm", "q=qps3-*", "--size", "10")  # fmt: skip
    cases = []
    for literal, shown in ((BIG, "1.11e+400"), ("1e400", "inf"), ("-1e400", "-inf")):
        cases.append(Case(f"kube-burner-{shown}", kb, ("podreadylatency", shown),
                          _fixture_with("kube-burner", KB_FILE, literal)))  # fmt: skip
        cases.append(Case(f"clusterloader2-{shown}", cl2, ("perc99", shown),
                          _fixture_with("clusterloader2", CL2_FILE, literal)))  # fmt: skip
    playbook = ("plan", "--playbook", "{tmp}/p.yaml", "--profile", "lab")
    for key, literal, words in (
        ("rounds", BIG, ("rounds", "1.11e+400")),
        ("seed", BIG, ("seed", "1.11e+400")),
        ("confidence", BIG, ("confidence", "1.11e+400")),
        ("margin_pct", ".inf", ("margin_pct", "finite")),
    ):
        text = PLAYBOOK.replace("rounds: 3\n", "") if key == "rounds" else PLAYBOOK
        if key == "seed":
            text = text.replace("seed: 1\n", "")
        cases.append(Case(f"playbook-{key}-{literal[:5]}", playbook, ("p.yaml", *words),
                          {"p.yaml": text + f"{key}: {literal}\n"}))  # fmt: skip
    return cases


FILE_CASES = _file_cases()


@pytest.mark.parametrize("case", FILE_CASES, ids=[c.id for c in FILE_CASES])
def test_a_measurement_file_or_playbook_refuses_the_same_numbers(
    case: Case, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_case(case, tmp_path, capsys)
