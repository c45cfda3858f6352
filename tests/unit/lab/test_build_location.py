"""Where a build lives: the node layer reads an arm's build, and the lab places it, by the one
rule of :func:`abtest.config.build_names.build_folder`."""

from __future__ import annotations

from pathlib import Path

from abtest.config.build_names import NodePath, build_binary, parse_build_name
from abtest.config.playbook import load_profile
from abtest.lab.kubelet_builds import placed_folder
from abtest.lab.layout import Paths
from abtest.node.kubelet_build import build_path


def test_the_node_and_the_lab_find_a_build_by_the_same_rule(tmp_path: Path) -> None:
    """The node layer's file for an arm's build and the lab's placed file are one rule's."""
    lab = load_profile("lab")
    build = parse_build_name("v1.36.3+agc.p2", "x", paths=False)
    assert lab.kubelet_builds_dir is not None
    on_node = build_path(build, lab)
    assert on_node == build_binary(lab.kubelet_builds_dir, build)
    assert on_node == f"{lab.kubelet_builds_dir.rstrip('/')}/v1.36.3+agc.p2/kubelet"
    paths = Paths(tmp_path)
    assert str(placed_folder(paths, build) / "kubelet") == build_binary(str(paths.kubelets), build)
    assert build_path(NodePath("/opt/kubelet"), lab) == "/opt/kubelet"
