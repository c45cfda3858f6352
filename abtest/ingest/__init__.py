"""Readers of other tools' pod start-up data (kube-burner, clusterloader2) into rounds."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from abtest.errors import UserError
from abtest.ingest.common import Ingested, parse_arm_globs


def load_foreign(
    kube_burner: Path | None,
    clusterloader2: Path | None,
    arms: Sequence[str] | None,
    *,
    job: str | None = None,
    block_field: str | None = None,
    size: int | None = None,
    latency: str | None = None,
) -> Ingested | None:
    """The rounds of ``--kube-burner DIR`` or ``--clusterloader2 DIR``; None when neither."""
    if kube_burner and clusterloader2:
        raise UserError(
            "give one of --kube-burner and --clusterloader2", "--kube-burner/--clusterloader2"
        )
    if kube_burner:
        from abtest.ingest.kube_burner import load_kube_burner

        globs = parse_arm_globs(arms, "--kube-burner")
        chosen = {"latency": latency} if latency else {}
        return load_kube_burner(
            kube_burner, globs, job=job, block_field=block_field, size=size, **chosen
        )
    if clusterloader2:
        from abtest.ingest.clusterloader2 import load_clusterloader2

        if job or block_field or latency:
            raise UserError(
                "--job, --block and --latency are kube-burner options", "--clusterloader2"
            )
        return load_clusterloader2(
            clusterloader2, parse_arm_globs(arms, "--clusterloader2"), size=size
        )
    if arms or job or block_field or latency:
        raise UserError(
            "--arm, --job, --block and --latency go with --kube-burner DIR or --clusterloader2 DIR",
            "--arm",
        )
    return None


__all__ = ["Ingested", "load_foreign"]
