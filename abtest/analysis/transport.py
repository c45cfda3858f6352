"""The report's Method line on how abtest reached each node (SSH or a pod; issue 47)."""

from __future__ import annotations

from typing import Any

from abtest.analysis.run_data import RunData


def transport_method(data: RunData) -> tuple[str, ...]:
    """One line naming the transport of each node, as the run's environment recorded it
    (none for a run recorded before abtest wrote it)."""
    envs = data.env.get("nodes")
    per_node: dict[str, Any] = envs if isinstance(envs, dict) and envs else {"": data.env}
    parts = []
    for name, env in sorted(per_node.items()):
        transport = env.get("transport") if isinstance(env, dict) else None
        if isinstance(transport, str) and transport:
            parts.append(f"{name} through {transport}" if name else f"through {transport}")
    if not parts:
        return ()
    if len(parts) == 1 and not parts[0].startswith("through"):
        return (f"Node access: {parts[0]}.",)
    if len(parts) == 1:
        return (f"Node access: the node was reached {parts[0]}.",)
    return (f"Node access: {'; '.join(parts)}.",)
