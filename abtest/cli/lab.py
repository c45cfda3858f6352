"""`abtest lab up [--nodes N] | status | down`: the embedded cluster."""

from __future__ import annotations

from typing import Annotated

import typer

from abtest.cli import options as o
from abtest.cli.render import console, print_json, print_table
from abtest.lab import control, layout

app = typer.Typer(
    help="The embedded lab: a real Kubernetes (one node, or up to "
    f"{layout.MAX_NODES}) on this machine.",
    no_args_is_help=True,
)


@app.command("up")
def up(
    nodes: Annotated[
        int,
        typer.Option(
            "--nodes",
            help=f"How many nodes (1-{layout.MAX_NODES}): each its own kubelet and containerd, "
            f"named {layout.NODE_NAME}, {layout.NODE_NAME}-2, ... At most {layout.MAX_NODES} on "
            "this 2-core machine: an idle node costs ~130 MiB and ~1 % of a core, but a fleet "
            "sweep runs a batch on every node at once and 3 batches already share the 2 cores "
            "with the control plane. On a "
            "running lab, adds or removes nodes only (down to N; removed nodes' Node objects are "
            "deleted).",
        ),
    ] = 1,
) -> None:
    """Build (first time) and start etcd, API server, scheduler, controller-manager,
    containerd and kubelet per node, and an sshd on loopback; idempotent. Node 1's profile
    is `lab` (playbooks/nodes/lab.yaml); node i's is written to
    /var/lib/abtest-lab/nodes/abtest-lab-i/profile.yaml (`--profile PATH`)."""
    st = control.up(say=lambda line: console.print(line, highlight=False), nodes=nodes)
    for node in st.nodes:
        console.print(
            f"node: {node.name}   ssh: {st.ssh_target}   profile: {node.profile}",
            highlight=False,
            soft_wrap=True,  # a path split over two lines cannot be copied
        )


@app.command("status")
def status(json_out: o.Json = False) -> None:
    """Each component's pid and health, node readiness, each node's runtime handlers (as
    its containerd reports them), the RuntimeClass objects, kubeconfig and SSH target."""
    st = control.status()
    if json_out:
        print_json(st.as_json())
    else:
        readiness = "Ready" if st.ready else "not Ready"
        print_table(
            f"lab: {'up' if st.up else 'down'}, {len(st.nodes)} node(s) {readiness}",
            ["component", "pid", "running", "healthy"],
            [(c.name, c.pid, c.running, c.healthy) for c in st.components],
        )
        console.print(f"KUBECONFIG={st.kubeconfig}   ssh: {st.ssh_target or '-'}")
        for node in st.nodes:
            health = "healthy" if all(node.healthy.values()) else "not healthy"
            console.print(
                f"node {node.name}: {'Ready' if node.ready else 'not Ready'}, {health}, "
                f"profile {node.profile}",
                highlight=False,
                soft_wrap=True,
            )
            handlers = ", ".join(node.runtime_handlers) or f"? ({node.runtime_handlers_error})"
            console.print(f"  runtime handlers: {handlers}", highlight=False, soft_wrap=True)
        classes = ", ".join(f"{n} (handler {h})" for n, h in st.runtime_classes.items())
        if st.runtime_classes_error:
            classes = f"? ({st.runtime_classes_error})"
        console.print(f"RuntimeClasses: {classes or 'none'}", highlight=False, soft_wrap=True)
        for line in st.left_behind:
            console.print(f"left behind: {line}", highlight=False)
        for line in st.kept:
            console.print(f"kept: {line}", highlight=False)
    if not st.up:
        raise typer.Exit(1)


@app.command("down")
def down(
    purge: Annotated[
        bool, typer.Option("--purge", help="Also delete the lab's state directory.")
    ] = False,
) -> None:
    """Stop everything the lab started (by pid), remove pod sandboxes, bridge and netns,
    and put back what `up` changed on the host (cgroup mounts, ip_forward, /etc/hosts, the
    SSH user and its sudoers file). Keeps the state directory unless --purge."""
    control.down(say=lambda line: console.print(line, highlight=False), purge=purge)
