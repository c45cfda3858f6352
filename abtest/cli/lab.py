"""`abtest lab up | status | down`: the embedded single-node cluster."""

from __future__ import annotations

import typer

from abtest.cli.render import console, print_json, print_table
from abtest.lab import control

app = typer.Typer(
    help="The embedded lab: a real single-node Kubernetes on this machine.", no_args_is_help=True
)


@app.command("up")
def up() -> None:
    """Build (first time) and start etcd, API server, scheduler, controller-manager,
    containerd, kubelet and an sshd on loopback; idempotent."""
    st = control.up(say=lambda line: console.print(line, highlight=False))
    console.print(f"node: {st.node}   ssh: {st.ssh_target}   profile: playbooks/nodes/lab.yaml")


@app.command("status")
def status(json_out: bool = typer.Option(False, "--json", help="Machine-readable output.")) -> None:
    """Each component's pid and health, node readiness, kubeconfig and SSH target."""
    st = control.status()
    if json_out:
        print_json(st.as_json())
    else:
        readiness = "Ready" if st.ready else "not Ready"
        print_table(
            f"lab: {'up' if st.up else 'down'}, node {st.node} {readiness}",
            ["component", "pid", "running", "healthy"],
            [(c.name, c.pid, c.running, c.healthy) for c in st.components],
        )
        console.print(f"KUBECONFIG={st.kubeconfig}   ssh: {st.ssh_target or '-'}")
        for line in st.left_behind:
            console.print(f"left behind: {line}", highlight=False)
        for line in st.kept:
            console.print(f"kept: {line}", highlight=False)
    if not st.up:
        raise typer.Exit(1)


@app.command("down")
def down(
    purge: bool = typer.Option(False, "--purge", help="Also delete the lab's state directory."),
) -> None:
    """Stop everything the lab started (by pid), remove pod sandboxes, bridge and netns,
    and put back what `up` changed on the host (cgroup mounts, ip_forward, /etc/hosts, the
    SSH user and its sudoers file). Keeps the state directory unless --purge."""
    control.down(say=lambda line: console.print(line, highlight=False), purge=purge)
