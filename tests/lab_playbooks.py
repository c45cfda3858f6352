"""Shipped playbooks as the lab tests run them: the same file with a shorter observation.

A round watches its pods for ``observe_s`` more after the batch is Ready (restarts, late
events); the shipped lab playbooks say 10 s, which is right for a measurement and idle time
for a test that asserts what a sweep stores, restores and resumes. Every round of the lab
tests that use these copies saves 9 s (the tests that assert on the observation itself,
tests/lab/batch, set their own). At 1 s every round still runs the observation (its watch,
its restart and Ready-regression checks), only for a shorter time.
"""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SHIPPED_OBSERVE = "observe_s: 10"


def quick_copy(folder: Path, name: str = "lab-sweep", observe_s: float = 1) -> str:
    """A copy of ``playbooks/NAME.yaml`` in ``folder`` that observes ``observe_s`` seconds after
    each batch; its path, for ``--playbook``. The playbook keeps its name, so a run stores the
    same playbook name as one of the shipped file; its node profile is named by the lab's
    shipped name (``nodes/lab.yaml`` resolves there from any folder)."""
    text = (REPO / "playbooks" / f"{name}.yaml").read_text()
    # fail loudly if the shipped file changes shape rather than silently keep 10 s
    assert text.count(SHIPPED_OBSERVE) == 1, f"playbooks/{name}.yaml: no single {SHIPPED_OBSERVE}"
    path = folder / f"{name}.yaml"
    path.write_text(text.replace(SHIPPED_OBSERVE, f"observe_s: {observe_s:g}"))
    return str(path)
