"""What a factor's level can be, and what a factor kind reads of a factor: the types beneath
both ``abtest.config.domain`` (whose ``Factor`` asks its kind) and ``abtest.config.kinds``
(whose kinds read these levels), so that neither imports the other's module back."""

from __future__ import annotations

from typing import Protocol

Scalar = bool | int | float | str
#: Several KubeletConfiguration paths and their values, in catalog order (a tuple, not a
#: dict, so factors stay hashable).
Settings = tuple[tuple[str, Scalar], ...]
#: None: a feature gate's level that leaves the gate unset (the binary's own default), so a
#: kubelet build that does not know the gate can share the arm.
FactorValue = Scalar | Settings | None
#: A kubelet_build level that means the node's own kubelet binary (no swap).
NODE_KUBELET = "node"
#: An arm's pod part: record keys and values. ``pod.annotations.<key>`` is a metadata
#: annotation; any other ``pod.<field>`` is the top-level pod spec field ``<field>``.
PodPart = tuple[tuple[str, Scalar], ...]


class Factor(Protocol):
    """What a kind reads of the factor it is asked about (:class:`abtest.config.domain.Factor`
    is the one there is)."""

    @property
    def name(self) -> str: ...
    @property
    def kind(self) -> str: ...
    @property
    def on(self) -> FactorValue: ...
    @property
    def off(self) -> FactorValue: ...
    @property
    def param(self) -> str | None: ...
    def value(self, on: bool) -> FactorValue: ...
