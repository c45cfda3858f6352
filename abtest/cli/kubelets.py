"""`abtest kubelets build | list | remove`: kubelet builds for any node."""

from __future__ import annotations

from typing import Annotated

import typer

from abtest.app import kubelets as use
from abtest.cli import options as o
from abtest.cli.render import console, print_json, print_table
from abtest.config.playbook import load_profile

app = typer.Typer(
    help="Kubelet builds for any node: build them here for its architecture, list what it "
    "holds, remove what abtest placed.",
    no_args_is_help=True,
)

Builds = Annotated[
    list[str],
    typer.Argument(
        metavar="BUILD...",
        help="Releases (v1.35.4), a release and a shipped patch series (v1.36.3+agc), or a "
        "release and a series folder of your own (v1.36.3+./my-series).",
    ),
]


def _say(line: str) -> None:
    console.print(line, highlight=False, soft_wrap=True)  # a split path cannot be copied


@app.command("build")
def build(
    names: Builds,
    profile: Annotated[
        str | None,
        typer.Option(
            "--profile",
            "-p",
            help="Build for this node profile's node: its architecture is read from it "
            "(uname -m over its connection).",
        ),
    ] = None,
    goarch: Annotated[
        str | None,
        typer.Option("--goarch", help="Build for this GOARCH (amd64, arm64, ...) instead."),
    ] = None,
    accept_new_host_key: o.AcceptNewHostKey = False,
) -> None:
    """Build kubelets here, for a node's architecture, into the cache.

    Each build is made once into ~/.cache/abtest, for the target node's architecture
    (cgo off: an amd64 machine builds an arm64 kubelet with Go alone; a kubelet is 2-10 min
    on 2 cores). Neither --profile nor --goarch: this machine's architecture. A sweep, regress or
    bisect places the builds its arms need on the node itself (kubelet.place_builds)."""
    prof = load_profile(profile) if profile else None
    for made in use.build(names, prof, goarch, _say, accept_new_host_key=accept_new_host_key):
        _say(f"kubelet {made.build} ({made.goarch}) at {made.binary} sha256 {made.sha256[:12]}")


@app.command("list")
def list_builds(
    profile: o.Profile,
    accept_new_host_key: o.AcceptNewHostKey = False,
    json_out: o.Json = False,
) -> None:
    """What the node holds in its profile's kubelet.builds_dir.

    Each build's size, sha256,
    whether abtest placed it (and it is unchanged since), what its --version says, and an
    interrupted upload's temp file (never used as a build; the next placement replaces it)."""
    found = use.list_node(load_profile(profile), accept_new_host_key=accept_new_host_key)
    if json_out:
        print_json([b.as_dict() for b in found])
        return
    rows = [
        (
            b.name,
            f"{b.size >> 20} MiB" if b.size is not None else "-",
            (b.sha256 or "-")[:12],
            "abtest" if b.placed_by_abtest else "not abtest",
            b.version or "-",
            "partial upload" if b.partial_upload else "",
        )
        for b in found
    ]
    print_table("kubelet builds", ["build", "size", "sha256", "placed by", "--version", ""], rows)


@app.command("remove")
def remove(
    name: Annotated[str, typer.Argument(metavar="BUILD", help="The build to remove.")],
    profile: o.Profile,
    accept_new_host_key: o.AcceptNewHostKey = False,
) -> None:
    """Remove a build abtest placed on the node.

    Under the node lock. A build abtest did
    not place, or whose binary changed since, or that a running kubelet runs, is refused."""
    folder = use.remove(load_profile(profile), name, accept_new_host_key=accept_new_host_key)
    _say(f"removed {folder}")
