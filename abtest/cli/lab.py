"""`abtest lab up [--nodes N] | status | down`: the embedded cluster."""

from __future__ import annotations

from typing import Annotated

import typer

from abtest.cli import options as o
from abtest.cli.render import console, print_json, print_table
from abtest.config.api_faults import ApiFaults, parse_api_faults
from abtest.config.api_latency import ApiLatency, parse_api_latency
from abtest.config.domain import parse_release
from abtest.config.kubelet_series import parse_build_name
from abtest.lab import control, kubelet_builds, layout, sdnode
from abtest.lab import status as lab_status
from abtest.lab.releases import DEFAULT_RELEASE

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
    kubernetes: Annotated[
        str | None,
        typer.Option(
            "--kubernetes",
            metavar="VERSION",
            help=f"The Kubernetes release of the whole lab (default: the kept lab's, else "
            f"{DEFAULT_RELEASE}, the newest release where PLEGOnDemandRelist can be switched "
            "both ways). Built once from the Go module proxy (~15 min) and cached by release. "
            "A kept lab moves to a newer release with its state; to an older minor only after "
            "`lab down --purge`; a running lab changes release only through `lab down`.",
        ),
    ] = None,
    systemd_node: Annotated[
        bool,
        typer.Option(
            "--systemd-node",
            help="Also run abtest-lab-systemd: a node shaped like the users' nodes (a Debian "
            "container booted by systemd-nspawn; kubelet, containerd and sshd are systemd units; "
            "the kubelet's files are kubeadm's). Its image is built once from Debian's packages "
            "(~4 min) and cached; its profile is written beside its state "
            "(docs/lab-systemd-node.md). On a running lab, adds it, or (without the flag) takes "
            "it away.",
        ),
    ] = False,
    api_latency: o.ApiLatencyOpt = None,
    api_faults: o.ApiFaultsOpt = None,
) -> None:
    """Build (first time) and start etcd, API server, scheduler, controller-manager,
    containerd and kubelet per node, and an sshd on loopback; idempotent. The first `up`
    on a machine also builds the lab's containerd (upstream, not Debian's 1.6; once for every
    release). Node 1's profile is `lab` (playbooks/nodes/lab.yaml); node i's is written to
    /var/lib/abtest-lab/nodes/abtest-lab-i/profile.yaml (`--profile PATH`)."""
    # an empty --kubernetes is a mistake (an unset variable), never "no flag"
    release = parse_release(kubernetes, "--kubernetes") if kubernetes is not None else None
    st = control.up(
        say=lambda line: console.print(line, highlight=False),
        nodes=nodes,
        kubernetes=release,
        systemd_node=systemd_node,
        api_latency=parse_api_latency(api_latency) if api_latency is not None else None,
        api_faults=parse_api_faults(api_faults) if api_faults is not None else None,
    )
    for node in st.nodes:
        console.print(
            f"node: {node.name}   ssh: {st.ssh_target}   profile: {node.profile}",
            highlight=False,
            soft_wrap=True,  # a path split over two lines cannot be copied
        )
    if st.systemd_node is not None:
        console.print(
            f"node: {st.systemd_node.name}   ssh: {sdnode.SSH_USER}@{sdnode.NODE_IP}:22   "
            f"profile: {st.systemd_node.profile}",
            highlight=False,
            soft_wrap=True,
        )


@app.command("status")
def status(json_out: o.Json = False) -> None:
    """Each component's pid and health, node readiness, each node's runtime handlers (as
    its containerd reports them), the RuntimeClass objects, kubeconfig and SSH target."""
    st = lab_status.status()
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
        console.print(
            f"Kubernetes {st.release or '-'} (API server reports "
            f"{st.api_server_version or '-'}); kubelet releases placed for arms: "
            f"{', '.join(st.kubelet_builds) or 'none'}",
            highlight=False,
        )
        latency = ApiLatency(st.api_latency_ms, st.api_jitter_ms)
        console.print(f"kubelets' API latency (--api-latency): {latency}", highlight=False)
        faults = ApiFaults(st.api_faults_kib)
        console.print(f"kubelets' API faults (--api-faults): {faults}", highlight=False)
        for node in st.nodes:
            health = "healthy" if all(node.healthy.values()) else "not healthy"
            console.print(
                f"node {node.name}: {'Ready' if node.ready else 'not Ready'}, {health}, "
                f"kubelet {node.kubelet_version or '-'}, "
                f"containerd {node.containerd_version or '-'}, profile {node.profile}",
                highlight=False,
                soft_wrap=True,
            )
            handlers = ", ".join(node.runtime_handlers) or f"? ({node.runtime_handlers_error})"
            console.print(f"  runtime handlers: {handlers}", highlight=False, soft_wrap=True)
        if st.systemd_node is not None:
            sd = st.systemd_node
            units = ", ".join(f"{u} {state}" for u, state in sd.units.items())
            console.print(
                f"node {sd.name} (systemd): {'Ready' if sd.ready else 'not Ready'}, "
                f"init pid {sd.init_pid or '-'} (nspawn {sd.nspawn_pid or '-'}), units: {units}, "
                f"kubelet {sd.kubelet_version or '-'}, profile {sd.profile}",
                highlight=False,
                soft_wrap=True,
            )
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


@app.command("kubelets")
def kubelets(
    versions: Annotated[
        list[str] | None,
        typer.Argument(
            metavar="[BUILD]...",
            help="Kubelet builds to place: releases (v1.34.4 v1.35.4), a release and a shipped "
            "patch series (v1.36.3+agc), or a release and a series folder of your own "
            "(v1.36.3+./my-series, placed as v1.36.3+my-series). None: list the placed ones.",
        ),
    ] = None,
    go_test: Annotated[
        bool,
        typer.Option(
            "--go-test",
            help="Also check each patched build's series on its patched source: gofmt of the "
            "Go files it touches, `go vet` and `go test` of the packages it touches (the "
            "series' own unit tests; several minutes on 2 cores).",
        ),
    ] = False,
) -> None:
    """Place extra kubelet builds on the lab's nodes for kubelet_build arms and
    --kubelet-build: each is built once from the Go module proxy (the kubelet only; a release
    ~2-5 min, a patched build ~5-10 min: the release's source copied, the series' patches
    applied in order, the kubelet built from the copy) and cached (a release by version, a
    series by its patches' content: a changed patch rebuilds), then put at
    /var/lib/abtest-lab/kubelets/BUILD/kubelet (a patched build with source.json, naming its
    release and each patch's sha256), the lab profile's `kubelet.builds_dir`. A build the
    version-skew policy does not allow under the lab's API server, a series for another
    release, a file that is not a diff or a patch that does not apply is refused before
    anything is built or placed. A series placed from a folder is named by its placed name
    (v1.36.3+./bd2 is placed as v1.36.3+bd2) here, in bisect and in every option taking a build;
    named so, it is used as placed. Patch series: kubelet-patches/README.md."""
    if not versions:
        placed = kubelet_builds.placed_kubelets(layout.Paths())
        console.print("\n".join(placed) if placed else "no kubelet builds placed")
        return
    wanted = [parse_build_name(v, "BUILD") for v in versions]

    def say(line: str) -> None:
        console.print(line, highlight=False, soft_wrap=True)  # a split path cannot be copied

    kubelet_builds.place_kubelets(wanted, say=say)
    if go_test:
        for line in kubelet_builds.test_series(wanted, say=say):
            say(line)


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
