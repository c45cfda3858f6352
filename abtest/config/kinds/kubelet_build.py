"""``kubelet_build``: which kubelet binary the node runs: ``node`` (its own), a build the lab
places (a release ``v1.35.4`` or a release and patch series ``v1.36.3+agc``: the file
``<kubelet.builds_dir>/<build>/kubelet`` on the node), or a path on it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from abtest.config.build_names import parse_build_name
from abtest.config.factor_levels import NODE_KUBELET, FactorValue
from abtest.config.full_match import whole
from abtest.config.kinds.base import FactorKind
from abtest.config.kinds.levels import required
from abtest.config.yaml_checks import Fields
from abtest.errors import UserError

if TYPE_CHECKING:
    from abtest.config.factor_levels import Factor

SAFE_NODE_PATH = re.compile(r"/[A-Za-z0-9._/+-]+")


class KubeletBuild(FactorKind):
    name = "kubelet_build"
    # several builds are levels of one choice, the node's binary: check_design guards it
    exclusive = False

    def read_levels(self, f: Fields) -> tuple[FactorValue, FactorValue]:
        return _build(f, "on"), _build(f, "off")

    def targets(self, factor: Factor) -> tuple[str, ...]:
        return ("kubelet:binary",)

    def kubelet_build(self, factor: Factor, on: bool) -> str:
        return str(factor.value(on))

    def check_design(
        self, design: str, factors: Sequence[Factor], ons: Sequence[frozenset[str]]
    ) -> None:
        builds = [f for f in factors if f.kind == self.name]
        if len({str(f.off) for f in builds}) > 1:
            levels = ", ".join(f"{f.name} off: {f.off}" for f in builds)
            raise UserError(
                f"kubelet-build factors with different off levels ({levels})",
                where="design",
                todo="give every kubelet_build factor of one design the same off level (the "
                "baseline's kubelet), e.g. off: node",
            )
        # an arm runs one kubelet binary: combined, leave-one-out or a factorial over two
        # builds would turn on two
        names = {f.name for f in builds}
        for on in ons:
            crossed = sorted(names & on)
            if len(crossed) > 1:
                raise UserError(
                    f"design {design!r} crosses the kubelet-build factors {', '.join(crossed)}: "
                    "one of its arms would run two kubelet binaries at once",
                    where="design",
                    todo="run the builds as levels of one choice with --design baseline+singles, "
                    "or keep one kubelet_build factor",
                )


def _build(f: Fields, key: str) -> str:
    value = required(f, key)
    todo = (
        "node (the node's own kubelet), a release such as v1.35.4, a release and a patch "
        "series such as v1.36.3+agc, or an absolute path"
    )
    if not isinstance(value, str) or not value:
        raise f.error(key, f"a kubelet build must be a string, got {value!r}", todo)
    if value == NODE_KUBELET:
        return value
    if value.startswith("/"):
        if not whole(SAFE_NODE_PATH, value) or "/../" in value or value.endswith("/.."):
            raise f.error(key, f"invalid path on the node {value!r}", "letters, digits, . _ / + -")
        return value
    return parse_build_name(value, f.where(key), paths=False).name


KIND = KubeletBuild()
