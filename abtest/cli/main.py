"""Entry point: builds the typer app from one module per command and maps errors to exits."""

from __future__ import annotations

import sys

import typer

from abtest import __version__
from abtest.cli import analyze, batch, gates, lab, node, plan, regress, report, runs
from abtest.errors import AbtestError, UserError
from abtest.node.signals import Interrupted

app = typer.Typer(
    help="A/B test kubelet feature gates and config fields on batch pod start-up.",
    no_args_is_help=True,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell (typer's).
    add_completion=True,
    pretty_exceptions_enable=False,
)
app.add_typer(lab.app, name="lab")
app.add_typer(node.app, name="node")
app.command("batch")(batch.batch)
app.command("gates")(gates.gates)
app.command("plan")(plan.plan)
app.command("report")(report.report)
app.command("analyze")(analyze.analyze)
app.command("regress")(regress.regress)
app.add_typer(runs.app, name="runs")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"abtest {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    """A/B test kubelet feature gates and config fields on batch pod start-up."""


def main() -> None:
    try:
        app()
    except UserError as exc:
        typer.secho(f"abtest: error: {exc.one_line()}", err=True, fg="red")
        sys.exit(exc.exit_code)
    except Interrupted as exc:
        # The node was restored before this propagated (finally blocks in the node layer).
        typer.secho(f"abtest: {exc}; the node was restored", err=True, fg="yellow")
        sys.exit(exc.exit_code)
    except AbtestError as exc:
        # Expected operational failures (node, cluster, lab): one line, their own exit code.
        typer.secho(f"abtest: {type(exc).__name__}: {exc}", err=True, fg="red")
        sys.exit(getattr(exc, "exit_code", 1))
