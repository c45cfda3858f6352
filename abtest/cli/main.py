"""Entry point: builds the typer app from one module per command and maps errors to exits.

Commands are loaded when invoked: `abtest --version` or `abtest gates --list` must not pay for
importing the Kubernetes client, paramiko, aiohttp, matplotlib and pandas (seconds on a busy
machine) that other commands need. `abtest --help` lists the commands from the summaries kept
here (tests/unit/cli/test_startup_imports.py keeps them equal to each command's own help)."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperCommand, TyperGroup
from typer.main import get_command_from_info, get_group_from_info

from abtest.cli import coercion
from abtest.cli.terminal import sane_terminal_env, visible
from abtest.errors import AbtestError, Interrupted, UserError
from abtest.process.version import __version__

if TYPE_CHECKING:
    from typer import _click
    from typer._click.shell_completion import CompletionItem


@dataclass(frozen=True)
class LazyCommand:
    module: str  # imported only when the command runs (or shows its own help)
    attr: str  # a command function, or a typer.Typer for a command group
    summary: str  # the first paragraph of its help: the line in `abtest --help`


# In the order `abtest --help` lists them (typer's: commands first, then command groups).
COMMANDS: dict[str, LazyCommand] = {
    "batch": LazyCommand(
        "abtest.cli.batch",
        "batch",
        "Run one pod batch on the node as it is (no config change), store it, show it.",
    ),
    "gates": LazyCommand(
        "abtest.cli.gates",
        "gates",
        "List factors (--list), or measure them on a node: --all, or NAME...",
    ),
    "plan": LazyCommand(
        "abtest.cli.plan",
        "plan",
        "Print the arms, the block schedule, kubelet restarts, an estimated duration and the\n"
        "smallest change each comparison can detect. Nothing is touched.",
    ),
    "report": LazyCommand(
        "abtest.cli.report",
        "report",
        "Render a stored run: tables with intervals, figures, tidy CSV/JSON.",
    ),
    "history": LazyCommand(
        "abtest.cli.history",
        "history",
        "A node's per-run figure across runs, its change points (Apache Otava) with the step and\n"
        "what changed; Markdown, HTML with a plot, JSON.",
    ),
    "analyze": LazyCommand(
        "abtest.cli.analyze",
        "analyze",
        "Compare every arm with the baseline: savings and percent reduction with intervals.",
    ),
    "regress": LazyCommand(
        "abtest.cli.regress",
        "regress",
        "Decide PASS / FAIL / INCONCLUSIVE for a candidate kubelet (binary and/or settings)\n"
        "against a reference, live on a node, from two stored runs, or from a rounds CSV.",
    ),
    "bisect": LazyCommand(
        "abtest.cli.bisect",
        "bisect",
        "Find the first build of an ordered range (releases, a patch series' prefixes, or a\n"
        "list) that made pod start-up slower.",
    ),
    "lab": LazyCommand(
        "abtest.cli.lab",
        "app",
        "The embedded lab: a real Kubernetes (one node, or up to 3) on this machine.",
    ),
    "kubelets": LazyCommand(
        "abtest.cli.kubelets",
        "app",
        "Kubelet builds for any node: build them here for its architecture, list what it "
        "holds, remove what abtest placed.",
    ),
    "node": LazyCommand(
        "abtest.cli.node",
        "app",
        "Check, show, change (apply) and restore a node's kubelet config over SSH.",
    ),
    "runs": LazyCommand(
        "abtest.cli.runs",
        "app",
        "Stored runs, newest first; `abtest runs show RUN` for one run.",
    ),
}


def load_target(name: str) -> Any:
    """The command function or sub-app behind ``name`` (imports its module)."""
    spec = COMMANDS[name]
    return getattr(importlib.import_module(spec.module), spec.attr)


def _load(name: str) -> _click.Command:
    """The click command typer would have built had the command been registered up front:
    registered on a scratch Typer exactly as before, converted with the root app's settings."""
    target = load_target(name)
    scratch = typer.Typer()
    if isinstance(target, typer.Typer):
        scratch.add_typer(target, name=name)
        return get_group_from_info(
            scratch.registered_groups[0],
            pretty_exceptions_short=app.pretty_exceptions_short,
            suggest_commands=app.suggest_commands,
            rich_markup_mode=app.rich_markup_mode,
        )
    scratch.command(name)(target)
    return get_command_from_info(
        scratch.registered_commands[0],
        pretty_exceptions_short=app.pretty_exceptions_short,
        rich_markup_mode=app.rich_markup_mode,
    )


class _Commands(MutableMapping[str, "_click.Command"]):
    """The root's commands by name: every name is known up front (typer lists them and suggests
    near names from them), a command's module is imported the first time it is looked up."""

    def __init__(self, given: Mapping[str, _click.Command]) -> None:
        self.loaded: dict[str, _click.Command] = dict(given)
        # While the root help or the completion of a command name is written, a stand-in
        # carrying the summary is enough: nothing is imported for them.
        self.listing = False

    def __getitem__(self, name: str) -> _click.Command:
        if name in self.loaded:
            return self.loaded[name]
        if name not in COMMANDS:
            raise KeyError(name)
        if self.listing:
            return TyperCommand(name=name, help=COMMANDS[name].summary)
        command = self.loaded[name] = _load(name)
        return command

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self.loaded

    def __setitem__(self, name: str, command: _click.Command) -> None:
        self.loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self.loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*COMMANDS, *(n for n in self.loaded if n not in COMMANDS)])

    def __len__(self) -> int:
        return len(COMMANDS.keys() | self.loaded.keys())


class LazyGroup(TyperGroup):
    """The root group, over :class:`_Commands`."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.commands = self.lazy = _Commands(self.commands)

    @contextmanager
    def _listing(self) -> Iterator[None]:
        self.lazy.listing = True
        try:
            yield
        finally:
            self.lazy.listing = False

    def main(self, *args: Any, **kwargs: Any) -> Any:
        # before rich or typer read the width (a command's console, typer's help): a
        # COLUMNS of 0 printed nothing at all, a TERMINAL_WIDTH of abc was a traceback
        sane_terminal_env()
        return super().main(*args, **kwargs)

    def format_help(self, ctx: _click.Context, formatter: _click.HelpFormatter) -> None:
        with self._listing():
            super().format_help(ctx, formatter)

    def shell_complete(self, ctx: _click.Context, incomplete: str) -> list[CompletionItem]:
        with self._listing():
            return super().shell_complete(ctx, incomplete)


# Typer would import pydantic to coerce the options' defaults: see abtest/cli/coercion.py.
coercion.install()

app = typer.Typer(
    cls=LazyGroup,
    help="A/B test kubelet feature gates and config fields on batch pod start-up.",
    no_args_is_help=True,
    # --install-completion / --show-completion for bash, zsh, fish and PowerShell (typer's).
    add_completion=True,
    pretty_exceptions_enable=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"abtest {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_version, is_eager=True, help="Show the version and exit."
        ),
    ] = False,
) -> None:
    """A/B test kubelet feature gates and config fields on batch pod start-up."""


def _say(text: str, colour: str, *, lines: bool = True) -> None:
    """An error line on stderr: its names and values come from files and databases, so it is
    shown as text (abtest.cli.terminal.visible), never as escapes the terminal obeys."""
    shown = visible(text, lines=lines, encoding=getattr(sys.stderr, "encoding", None))
    typer.secho(shown, err=True, fg=colour)


def main() -> None:
    try:
        app()
    except UserError as exc:
        for line in exc.lines():  # one line each (an import's refused values)
            _say(f"abtest: error: {line}", "red", lines=False)
        sys.exit(exc.exit_code)
    except Interrupted as exc:
        # The node was restored before this propagated (finally blocks in the node layer).
        _say(f"abtest: {exc}; the node was restored", "yellow")
        sys.exit(exc.exit_code)
    except AbtestError as exc:
        # Expected operational failures (node, cluster, lab): one line, their own exit code.
        _say(f"abtest: {type(exc).__name__}: {exc}", "red")
        sys.exit(exc.exit_code)
