"""Every option more than one command takes, declared once: an ``Annotated`` alias per option
(one typer style), so a command spells, types and documents it the same way as the others.

A command takes ``db: o.Db = None``; the type in the alias is the one mypy checks."""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Generic, TypeVar

import typer

from abtest.config import numbers as num
from abtest.config.api_faults import FLAG as API_FAULTS_FLAG
from abtest.config.api_faults import MIN_KIB, parse_api_faults
from abtest.config.api_latency import FLAG as API_LATENCY_FLAG
from abtest.config.api_latency import MAX_MS, parse_api_latency
from abtest.config.k8s_names import namespace_problem
from abtest.config.paths import output_problem
from abtest.errors import UserError

if TYPE_CHECKING:
    from abtest.config.playbook import NodeProfile

N = TypeVar("N", int, float)


def with_kube(profile: NodeProfile, kubeconfig: str | None, context: str | None) -> NodeProfile:
    """abtest.app.profiles.with_kube, for the commands and tests that apply --kubeconfig and
    --context to a profile. Imported when called: every command imports this module, and the
    playbook parser behind it is no part of `gates --list` or `--version`."""
    from abtest.app.profiles import with_kube as apply

    return apply(profile, kubeconfig, context)


def _flag(param: typer.CallbackParam) -> str:
    return max(param.opts, key=len) if param.opts else str(param.name)


def in_range(rng: num.Range) -> Callable[[typer.CallbackParam, N | None], N | None]:
    """A typer callback: the flag's value is finite and in ``rng`` (click's own FloatRange lets
    NaN through: every comparison with NaN is false). A UserError, so it is the one line every
    bad input gets (abtest.cli.main)."""

    def check(param: typer.CallbackParam, value: N | None) -> N | None:
        if value is not None and (problem := rng.problem(value)):
            raise UserError(problem, _flag(param), "see --help for the allowed values")
        return value

    return check


def ranged(flag: str, rng: num.Range, help: str) -> Any:
    """A number option checked by :func:`in_range`, for ``Annotated[int | None, ...]``."""
    return typer.Option(flag, callback=in_range(rng), help=help)


# --- results and output ----------------------------------------------------------------
DB_FLAG = "--db"  # named in errors about the database a command was given
Db = Annotated[
    str | None,
    typer.Option(
        DB_FLAG,
        help="Results database: a SQLite file, or a shared postgresql://USER@HOST/DB "
        "(default: $ABTEST_DB, else ~/.local/share/abtest/results.sqlite). Other URL schemes "
        "and libpq KEY=VALUE strings are refused; a password is never shown.",
    ),
]
Json = Annotated[bool, typer.Option("--json", help="Machine-readable output (JSON on stdout).")]
Confidence = Annotated[
    float, typer.Option("--confidence", help="Two-sided interval level, e.g. 0.95.")
]

#: where a command that writes a report's files (history, report) puts its folder without --out
REPORTS = Path("reports")


def out_folder(default: str) -> Any:
    """The --out folder option of a command that writes a report's files (history, report), one
    flag and wording for both: ``default`` names its folder under reports/ (RUN_ID, ...)."""
    return typer.Option("--out", "-o", help=f"Folder to write into. Default: reports/{default}/.")


def check_output_file(path: Path, flag: str) -> None:
    """Refuse a file the command is to write that cannot be written (why: output_problem),
    for a command to call before it reads or touches anything, so a typo costs nothing."""
    if problem := output_problem(path):
        raise UserError(
            f"cannot write {path}: {problem}", flag, "give a file path in a folder that exists"
        )


# --- nodes ---------------------------------------------------------------------------------
Profile = Annotated[
    str,
    typer.Option(
        "--profile",
        "-p",
        help="Node profile: a path to an existing YAML file is that file, otherwise a shipped "
        "name (lab, kubeadm-systemd).",
    ),
]
Profiles = Annotated[
    list[str] | None,
    typer.Option(
        "--profile",
        help="Node profile: a path to an existing YAML file is that file, otherwise a shipped "
        "name (lab, kubeadm-systemd); repeat for several nodes at once.",
    ),
]
AcceptNewHostKey = Annotated[
    bool,
    typer.Option(
        "--accept-new-host-key", help="Trust and record the host key of a node seen first."
    ),
]
BreakLock = Annotated[bool, typer.Option("--break-lock", help="Take over a stale node lock.")]
Kubeconfig = Annotated[
    str | None,
    typer.Option(
        "--kubeconfig",
        help="kubeconfig file(s), ':'-separated as in KUBECONFIG; overrides the profile's.",
    ),
]
Context = Annotated[
    str | None,
    typer.Option("--context", help="kubeconfig context to use; overrides the profile's context:."),
]

# --- what a sweep (gates, plan) or a live gate (regress) runs ------------------------------
Playbook = Annotated[str, typer.Option("--playbook", help="Playbook name or path.")]
Catalog = Annotated[
    str | None, typer.Option("--catalog", help="agc, lab or a path (default: the playbook's).")
]
Design = Annotated[
    str | None,
    typer.Option(
        "--design",
        help="gates-all, attribution, factorial, screen, or baseline+singles+... parts.",
    ),
]
Attribution = Annotated[
    bool,
    typer.Option("--attribution", help="Also all-on-minus-one arms (per-gate attribution)."),
]
Rounds = Annotated[
    int | None, ranged("--rounds", num.ROUNDS, "Blocks (each visits every arm once).")
]
Sizes = Annotated[
    str | None, typer.Option("--sizes", help="Batch sizes, comma-separated, e.g. 50,100,150.")
]
Margin = Annotated[
    float | None,
    typer.Option("--margin", help="Allowed slowdown in percent, 0 to 100; default: playbook's."),
]
Seed = Annotated[int | None, ranged("--seed", num.SEED, "Seed of the randomized block order.")]
Qps = Annotated[float | None, ranged("--qps", num.QPS, "Target create requests per second.")]
Concurrency = Annotated[
    int | None, ranged("--concurrency", num.CONCURRENCY, "At most this many creates in flight.")
]


def check_namespace(param: typer.CallbackParam, value: str | None) -> str | None:
    if value is not None and (problem := namespace_problem(value)):
        raise UserError(problem, _flag(param), "e.g. --namespace abtest")
    return value


Namespace = Annotated[
    str | None,
    typer.Option(
        "--namespace", callback=check_namespace, help="Namespace the tool owns for its pods."
    ),
]


KubeletBuildOpt = Annotated[
    str | None,
    typer.Option(
        "--kubelet-build",
        metavar="BUILD",
        help="Run every arm on this kubelet build instead of the node's own binary: a release "
        "(v1.35.4) or a release and patch series (v1.36.3+agc) placed in the profile's "
        "kubelet.builds_dir (`abtest lab kubelets BUILD`). The series' gates are then switched "
        "by config like any gate; the swap is journaled and the node's own kubelet restored.",
    ),
]


def parse_sizes(text: str | None) -> tuple[int, ...] | None:
    if not text:
        return None
    shown = text if len(text) <= 40 else text[:37] + "..."
    try:
        sizes = tuple(int(s) for s in text.split(",") if s.strip())
    except ValueError:
        raise UserError(f"invalid sizes {shown!r}", "--sizes", "e.g. --sizes 10,20") from None
    if len(sizes) > num.MAX_SIZES:
        raise UserError(f"{len(sizes)} sizes, more than {num.MAX_SIZES}", "--sizes")
    for size in sizes:
        num.SIZE.check(size, "--sizes", "pods per batch, e.g. --sizes 10,20")
    return sizes or None


# --- the lab ---------------------------------------------------------------------------------
def check_api_latency(param: typer.CallbackParam, value: str | None) -> str | None:
    if value is not None:
        parse_api_latency(value)  # its UserError is the one line bad input gets
    return value


ApiLatencyOpt = Annotated[
    str | None,
    typer.Option(
        API_LATENCY_FLAG,
        metavar="MS[:JITTER]",
        callback=check_api_latency,
        help="Delay every lab kubelet's responses from the API server by MS milliseconds "
        f"(+/- JITTER; MS <= {MAX_MS}), through a toxiproxy on 127.0.0.1 (a control plane at "
        "a distance); the generator and watcher keep their direct path. Default: the kept "
        "lab's setting, else 0. On a running lab, only the proxy's setting changes.",
    ),
]


def check_api_faults(param: typer.CallbackParam, value: str | None) -> str | None:
    if value is not None:
        parse_api_faults(value)
    return value


ApiFaultsOpt = Annotated[
    str | None,
    typer.Option(
        API_FAULTS_FLAG,
        metavar="KIB",
        callback=check_api_faults,
        help="Make some of the lab kubelets' API writes fail: the same proxy cuts each kubelet "
        f"connection after KIB KiB of its requests (0: never; else >= {MIN_KIB}); what is in "
        "flight fails, and client-go retries a GET but never a PATCH, so status writes fail. "
        "Default: the kept lab's setting, else 0. On a running lab, only the proxy changes.",
    ),
]


# --- groups of options ----------------------------------------------------------------------

T = TypeVar("T")
R = TypeVar("R")


def option(name: str, alias: object, default: object) -> inspect.Parameter:
    """One option of a group: its parameter name, its alias below, its default."""
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=alias
    )


@dataclass(frozen=True)
class OptionGroup(Generic[T]):
    """Options several commands take together, declared once (asv's ``common_args.add_*``):
    the group's parameters, in the order every command's --help shows them, and the one value
    they make. A command names the value as one keyword-only parameter (``inputs:
    SweepInputs``) and is decorated with ``@SWEEP_INPUTS.into("inputs")``: typer sees the
    group's options in that parameter's place, and the command is called with their value."""

    #: the options, in the order a command's --help lists them
    params: tuple[inspect.Parameter, ...]
    #: what they make together, called with each option's value by its parameter's name
    make: Callable[..., T]

    @classmethod
    def of(cls, record: type[T]) -> OptionGroup[T]:
        """The group whose options are the fields of the dataclass ``record``, in its order:
        each field's type is its option's alias, its default the option's (none: required),
        and the group's value is the record of the options' values."""
        aliases = typing.get_type_hints(record, include_extras=True)
        return cls(
            tuple(
                option(
                    f.name,
                    aliases[f.name],
                    inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default,
                )
                for f in dataclasses.fields(record)  # type: ignore[arg-type]
            ),
            record,
        )

    def into(self, name: str) -> Callable[[Callable[..., R]], Callable[..., R]]:
        """Put the group's options in the place of the command's parameter `name`."""

        def decorate(command: Callable[..., R]) -> Callable[..., R]:
            own = inspect.signature(command, eval_str=True)
            params = list(own.parameters.values())
            at = [p.name for p in params].index(name)
            params[at : at + 1] = self.params
            names = [p.name for p in self.params]

            @functools.wraps(command)
            def run(*args: Any, **kwargs: Any) -> R:
                kwargs[name] = self.make(**{n: kwargs.pop(n) for n in names})
                return command(*args, **kwargs)

            # typer reads both: the signature for the options, the annotations for their types
            run.__signature__ = own.replace(parameters=params)  # type: ignore[attr-defined]
            run.__annotations__ = {p.name: p.annotation for p in params}
            return run

        return decorate
