"""Typer's value coercion without pydantic where it would change nothing.

Typer (0.29 here, which carries its own click) coerces every option's value, a ``None``
default included, through a pydantic ``TypeAdapter`` built the first time the option is processed:
``abtest gates --list`` spent about half its start-up (0.36 s over bare Python where issue 43
allows 0.3 s) importing pydantic and building some 25 adapters for options that all held
``None``, ``False`` or a ``str`` default. No typer setting turns that off (``rich_markup_mode``
and ``pretty_exceptions_*`` only change the help and tracebacks).

:func:`install` makes typer build, per option, a stand-in that passes through what the adapter
would return unchanged (``None``, and a ``str`` for a plain ``str`` option: typer's own
``str(value)``), and hands every other value to the adapter typer would have built, built then.
Typer's checks around the call (required options, "Value must be an iterable", callbacks) are
its own and unchanged (tests/unit/cli/test_coercion.py compares the two). With a typer that
lacks these internals nothing is installed and typer coerces as it does; should that import
pydantic, tests/unit/cli/test_startup_imports.py says so."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

try:
    import typer.core as _typer_core
    from typer._coercion import RuntimeParam, TypeDescriptor, build_runtime_param
except ImportError:  # pragma: no cover - another typer: coerce as it does
    _typer_core = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from typer._click import Context
    from typer.core import _TyperParameter

if _typer_core is not None and hasattr(_typer_core, "build_runtime_param"):

    @dataclass(frozen=True)
    class DeferredRuntimeParam(RuntimeParam):
        """Typer's coercion for one option, built when a value needs it."""

        descriptor: TypeDescriptor

        def _coerce_value(self, value: Any, param: _TyperParameter, ctx: Context) -> Any:
            # `None` never gets here: RuntimeParam.coerce returns it (or `()`) first.
            plain = self.parameter_info.parser is None and self.descriptor.file_annotation is None
            if plain and self.annotation is str and type(value) is str:
                return value
            real = param._runtime_param = build_runtime_param(self.descriptor)
            return real._coerce_value(value, param=param, ctx=ctx)

    def _deferred(descriptor: TypeDescriptor) -> RuntimeParam:
        return DeferredRuntimeParam(
            parameter_info=descriptor.parameter_info,
            annotation=descriptor.annotation,
            descriptor=descriptor,
        )

    def install() -> bool:
        """Typer builds :class:`DeferredRuntimeParam` (True), or this typer has no such hook."""
        # typer.core looks the name up when an option is first processed.
        _typer_core.build_runtime_param = _deferred  # type: ignore[attr-defined]
        return True

else:  # pragma: no cover

    def install() -> bool:
        return False
