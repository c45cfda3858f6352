"""Start-up (issue 15 section 1): the commands that only list, plan or read the results database
import neither the Kubernetes client, paramiko, aiohttp nor matplotlib unless they need them,
and loading commands lazily changed no help text. No timing here (benchmarks/startup.py)."""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from sweeps import build_sweep
from typer.testing import CliRunner

from abtest.cli import main as cli_main
from abtest.store.db import Store

# Never needed to list, plan or read stored runs; matplotlib only to draw a report's figures.
NODE_AND_CLUSTER = ("kubernetes", "paramiko", "aiohttp")
NO_PLOTS = (*NODE_AND_CLUSTER, "matplotlib")
# A command that computes no statistics has no use for these either (they cost ~1 s).
NO_STATS = (*NO_PLOTS, "pandas", "numpy", "scipy")
# Typer coerces options through pydantic (about half of gates --list's start-up, issue 43):
# abtest/cli/coercion.py spares the options that hold only their None/False/str defaults.
NO_PYDANTIC = (*NO_STATS, "pydantic", "pydantic_core", "annotated_types")
# `--version` prints one line: no tables (rich) and no catalog or playbook files (yaml).
BARE = (*NO_PYDANTIC, "rich", "yaml")

FIXTURES = Path(__file__).parents[2] / "fixtures"

# Runs the real entry point once per command line in one interpreter (a list in a JSON file) and
# writes, for each, its exit code, what it printed and the names in sys.modules after it (typer
# ends every command with SystemExit). The names only grow from one command to the next, so a
# command whose names hold no banned module would import none of them on its own either; the
# commands that share a banned list share an interpreter (22 start-ups became 3).
PROBE = (
    "import contextlib, io, json, sys\n"
    "from abtest.cli.main import main\n"
    "todo, path, out = json.load(open(sys.argv[1])), sys.argv[2], []\n"
    "for argv in todo:\n"
    "    sys.argv, text, code = ['abtest', *argv], io.StringIO(), 0\n"
    "    with contextlib.redirect_stdout(text):\n"
    "        try:\n"
    "            main()\n"
    "        except SystemExit as e:\n"
    "            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)\n"
    "    out.append({'code': code, 'stdout': text.getvalue(), 'modules': sorted(sys.modules)})\n"
    "json.dump(out, open(path, 'w'))\n"
)

CASES: list[tuple[list[str], tuple[str, ...]]] = [
    (["--version"], BARE),
    (["--help"], NO_PYDANTIC),
    ([], NO_PYDANTIC),  # no arguments: the help
    (["gates", "--list"], NO_PYDANTIC),
    (["gates", "--list", "--catalog", "lab", "--json"], NO_PYDANTIC),
    (["gates", "--help"], NO_PYDANTIC),
    (["plan", "--playbook", "lab-sweep"], NO_PLOTS),
    (["plan", "--playbook", "lab-sweep", "--detect", "10%", "--json"], NO_PLOTS),
    (["plan", "--help"], NO_PLOTS),
    (["runs"], NO_PLOTS),
    (["runs", "--json"], NO_PLOTS),
    (["runs", "show", "{run}"], NO_PLOTS),
    (["analyze", "{csv}"], NO_PLOTS),
    (["analyze", "{csv}", "--format", "json"], NO_PLOTS),
    (
        ["analyze", "--kube-burner", "{kb}", "--arm", "baseline=baseline/*", "--arm", "q=qps3/*"],
        NO_PLOTS,
    ),
    (["analyze", "--help"], NO_PLOTS),
    (["report", "{run}", "--format", "json,csv", "--out", "{out}"], NO_PLOTS),
    (["report", "{run}", "--format", "junit", "--out", "{out}"], NO_PLOTS),
    (["report", "--help"], NO_PLOTS),
    (["bisect", "--help"], NO_PLOTS),
    # Markdown and HTML carry figures: matplotlib is needed there, the node and cluster are not.
    (["report", "{run}", "--out", "{out}"], NODE_AND_CLUSTER),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("startup")
    db = folder / "results.sqlite"
    with Store(db) as store:
        run_id = build_sweep(store)
    csv = folder / "rounds.csv"
    rows = ["arm,size,block,batch_ready_s"]
    for block in range(1, 5):
        rows += [f"baseline,20,{block},{4 + block * 0.1}", f"fast,20,{block},{3 + block * 0.12}"]
    csv.write_text("\n".join(rows) + "\n", encoding="utf-8")
    return {
        "db": str(db),
        "run": run_id,
        "csv": str(csv),
        "out": str(folder / "report"),
        "kb": str(FIXTURES / "kube-burner"),
    }


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    modules: set[str]  # top-level names in sys.modules after the command
    new: set[str]  # ... of them not there before it (in its shared interpreter)
    dotted: set[str]  # every module name in sys.modules after it


def _run_in_one_interpreter(
    commands: list[list[str]], inputs: dict[str, str], folder: Path
) -> list[Ran]:
    todo, out = folder / "todo.json", folder / "ran.json"
    todo.write_text(json.dumps([[a.format(**inputs) for a in args] for args in commands]))
    done = subprocess.run(
        [sys.executable, "-c", PROBE, str(todo), str(out)],
        capture_output=True,
        text=True,
        cwd=folder,
        env={"ABTEST_DB": inputs["db"], "PATH": "/usr/bin:/bin", "COLUMNS": "100"},
        timeout=300,
        check=False,
    )
    assert done.returncode == 0 and out.exists(), done.stdout + done.stderr
    ran: list[Ran] = []
    before: set[str] = set()
    for r in json.loads(out.read_text()):
        modules = {m.split(".")[0] for m in r["modules"]}
        ran.append(Ran(r["code"], r["stdout"], modules, modules - before, set(r["modules"])))
        before = modules
    return ran


# A command that must load its layers when invoked, run after the cases that ban those layers.
SWEEP_HELP = ["node", "--help"]


@pytest.fixture(scope="module")
def ran(inputs: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> dict[str, Ran]:
    """Each case's outcome by its command line, one interpreter per banned list."""
    groups: dict[tuple[str, ...], list[list[str]]] = {}
    for args, banned in CASES:
        groups.setdefault(banned, []).append(args)
    groups[NODE_AND_CLUSTER].append(SWEEP_HELP)
    results: dict[str, Ran] = {}
    for commands in groups.values():
        folder = tmp_path_factory.mktemp("probe")
        for args, r in zip(
            commands, _run_in_one_interpreter(commands, inputs, folder), strict=True
        ):
            results[" ".join(args)] = r
    return results


@pytest.mark.parametrize(("args", "banned"), CASES, ids=lambda v: " ".join(v) if v else "-")
def test_command_imports_only_what_it_needs(
    args: list[str], banned: tuple[str, ...], ran: dict[str, Ran]
) -> None:
    r = ran[" ".join(args)]
    # --help with no arguments exits 2 (typer's no_args_is_help); everything else succeeds.
    assert r.code == (2 if not args else 0), r.stdout
    assert not r.new & set(banned), f"abtest {' '.join(args)} imported {r.new & set(banned)}"
    earlier = r.modules & set(banned)
    assert not earlier, f"a command run before abtest {' '.join(args)} imported {earlier}"
    assert r.stdout.strip(), "the command printed nothing"


# Modules of packages these commands do import, deferred to where they are needed (issue 43).
DEFERRED: list[tuple[list[str], tuple[str, ...]]] = [
    # the command modules, the catalog and its factor kinds; typer's pydantic adapters
    (["--version"], ("abtest.cli.gates", "abtest.config.catalog", "typer._adapters")),
    # the playbook and profile parser (abtest.cli.options imports it only for with_kube)
    (["gates", "--list"], ("abtest.app.profiles", "abtest.config.playbook", "typer._adapters")),
    (
        ["gates", "--list", "--catalog", "lab", "--json"],
        ("abtest.app.profiles", "abtest.config.playbook"),
    ),
]


@pytest.mark.parametrize(("args", "deferred"), DEFERRED, ids=lambda v: " ".join(v))
def test_start_up_defers_what_it_does_not_use(
    args: list[str], deferred: tuple[str, ...], ran: dict[str, Ran]
) -> None:
    # by dotted name; the interpreter is shared, so "not imported by the commands so far"
    r = ran[" ".join(args)]
    assert not r.dotted & set(deferred), (
        f"abtest {' '.join(args)} imported {r.dotted & set(deferred)}"
    )
    assert "abtest.cli.main" in r.dotted and r.stdout.strip()


def test_a_sweep_command_still_loads_its_module(ran: dict[str, Ran]) -> None:
    """The lazy loading is per command: one that talks to a node gets its layers when invoked
    (run after commands that must not load them, so they are new here)."""
    r = ran[" ".join(SWEEP_HELP)]
    assert r.code == 0 and "paramiko" in r.new and "restore" in r.stdout


def _eager_app() -> typer.Typer:
    """The app as main.py built it before the lazy loading: every module imported, every
    command registered up front (commands first, then sub-apps, as typer lists them)."""
    app = typer.Typer(
        help=cli_main.app.info.help,
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
    )
    app.callback()(cli_main._root)
    loaded = {name: cli_main.load_target(name) for name in cli_main.COMMANDS}
    for name, target in loaded.items():
        if not isinstance(target, typer.Typer):
            app.command(name)(target)
    for name, target in loaded.items():
        if isinstance(target, typer.Typer):
            app.add_typer(target, name=name)
    return app


HELP_ARGS = [
    ["--help"],
    [],
    *([name, "--help"] for name in cli_main.COMMANDS),
    ["runs", "show", "--help"],
    ["lab", "up", "--help"],
    ["node", "apply", "--help"],
]


@pytest.mark.parametrize("args", HELP_ARGS, ids=lambda v: " ".join(v) if v else "-")
def test_help_is_unchanged(args: list[str]) -> None:
    env = {"COLUMNS": "100", "TERMINAL_WIDTH": "100"}
    lazy = CliRunner().invoke(cli_main.app, args, env=env, prog_name="abtest")
    eager = CliRunner().invoke(_eager_app(), args, env=env, prog_name="abtest")
    assert lazy.exit_code == eager.exit_code
    assert lazy.output == eager.output
    assert "Usage: abtest" in lazy.output


def test_summaries_are_the_commands_own_help() -> None:
    """`abtest --help` lists each command from a summary in main.py (so the list needs no
    import); it must be the first paragraph of the command's real help."""
    for name, spec in cli_main.COMMANDS.items():
        target = cli_main.load_target(name)
        if isinstance(target, typer.Typer):
            command = typer.main.get_group(target)
            text = command.help or ""
        else:
            text = inspect.getdoc(target) or ""
        first = inspect.cleandoc(text).split("\n\n")[0]
        assert spec.summary == first, (
            f"update COMMANDS[{name!r}].summary in abtest/cli/main.py to {first!r}"
        )


def test_version_and_errors_still_work(inputs: dict[str, str], tmp_path: Path) -> None:
    result = CliRunner().invoke(cli_main.app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith("abtest ")
    unknown = CliRunner().invoke(cli_main.app, ["gatez"])
    assert unknown.exit_code == 2 and "gates" in unknown.output  # typer suggests the near name
    done = subprocess.run(
        [sys.executable, "-c", "from abtest.cli.main import main; main()", "report", "nope"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={"ABTEST_DB": str(tmp_path / "none.sqlite"), "PATH": "/usr/bin:/bin"},
        timeout=300,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("abtest: error: ") and "no results database here" in done.stderr
