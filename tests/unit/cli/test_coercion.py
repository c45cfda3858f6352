"""Typer's coercion deferred (abtest/cli/coercion.py, issue 43): every value an option can be
given comes out as typer's own pydantic coercion makes it, or fails with the same error; only
the pydantic import is saved, for options that hold None or a plain string."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import pytest
import typer
import typer.core
import typer.main
from typer._click import Context
from typer._coercion import build_runtime_param
from typer.testing import CliRunner

from abtest.cli import coercion
from abtest.cli import main as cli_main

pytestmark = pytest.mark.skipif(
    not hasattr(coercion, "DeferredRuntimeParam"), reason="a typer without pydantic coercion"
)

app = typer.Typer()


@app.command()
def probe(
    name: str = "x",
    count: int | None = None,
    ratio: Annotated[float, typer.Option(min=0, max=1)] = 0.5,
    items: list[str] | None = None,
    path: Path | None = None,
    flag: bool = False,
    doubled: Annotated[int, typer.Option(parser=lambda s: int(s) * 2)] = 1,
) -> None:
    """Echo what typer made of each option."""
    typer.echo(repr((name, count, ratio, items, path, flag, doubled)))


VALUES: list[Any] = [None, "x", "3", "0.7", "2", "", "/tmp", "yes", b"bytes", ["a", "b"], True]


def _outcome(runtime: Any, value: Any, param: Any, ctx: Context) -> tuple[Any, ...]:
    try:
        return ("ok", runtime.coerce(value, param=param, ctx=ctx))
    except Exception as exc:  # the error typer shows is the point of the comparison
        return ("error", type(exc).__name__, str(exc))


def test_every_value_coerces_as_typer_coerces_it() -> None:
    command = typer.main.get_command(app)
    ctx = Context(command)
    compared = 0
    for param in command.params:
        assert isinstance(param, typer.core._TyperParameter)
        for value in VALUES:
            param._runtime_param = None
            typers = _outcome(build_runtime_param(param.type_descriptor), value, param, ctx)
            param._runtime_param = None
            deferred = _outcome(coercion._deferred(param.type_descriptor), value, param, ctx)
            assert deferred == typers, f"--{param.name} given {value!r}"
            compared += 1
    assert compared == len(command.params) * len(VALUES)


def test_installed_and_used_by_the_cli() -> None:
    """main.py installs it: an option processed through the app gets the stand-in first, and
    typer's adapter once a value needs it."""
    assert cli_main.app.registered_callback is not None  # the module is loaded, and with it:
    assert typer.core.build_runtime_param is coercion._deferred  # type: ignore[attr-defined]
    command = typer.main.get_command(app)
    ctx = Context(command)
    params = {p.name: p for p in command.params if isinstance(p, typer.core._TyperParameter)}
    assert isinstance(params["name"].get_runtime_param(), coercion.DeferredRuntimeParam)
    assert params["count"].process_value(ctx, "7") == 7
    assert not isinstance(params["count"]._runtime_param, coercion.DeferredRuntimeParam)


def test_the_cli_reports_bad_values_as_before() -> None:
    ok = CliRunner().invoke(app, ["--count", "4", "--doubled", "5", "--items", "a"])
    assert ok.exit_code == 0, ok.output
    assert ok.output.strip() == "('x', 4, 0.5, ['a'], None, False, 10)"
    bad = CliRunner().invoke(app, ["--ratio", "2"], env={"COLUMNS": "100"})
    assert bad.exit_code == 2
    assert "Invalid value for '--ratio'" in bad.output
