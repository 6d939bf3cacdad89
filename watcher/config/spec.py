"""How a configuration key is declared: :func:`key` (a dataclass field with its metadata), the
:func:`section` decorator, the :class:`Reload` classes, and :class:`KeySpec`, a key read back as data.

The keys themselves are in :mod:`watcher.config.schema`.
"""

from __future__ import annotations

import dataclasses
import enum
import typing
from dataclasses import dataclass, field
from typing import Any, TypeVar, dataclass_transform

from watcher.config.rules import Rule


class Reload(enum.Enum):
    """What a SIGHUP reload does with a changed key (the value is the README's wording)."""

    HOT = "yes"  # applied at once
    ENGINE = "yes (loads the model again)"  # applied by loading a new engine (watcher.runtime.reload)
    NEW_AGENTS = "new agents"  # applies to agents that attach after the reload
    RESTART = "restart"  # keeps its running value until `systemctl restart compactd`
    START = "(used at start)"  # only read when the daemon starts

    @property
    def meaning(self) -> str:
        """One line for the docs' legend."""
        return _RELOAD_MEANING[self]


_RELOAD_MEANING: dict[Reload, str] = {
    Reload.HOT: "a reload applies it",
    Reload.ENGINE: "a reload applies it by loading the model again",
    Reload.NEW_AGENTS: "it applies to agents that attach after the reload",
    Reload.RESTART: "it keeps its running value until `systemctl restart compactd`",
    Reload.START: "it is read only when the daemon starts",
}


@dataclass(frozen=True)
class KeyMeta:
    """What :func:`key` records beside the default (in the field's metadata)."""

    doc: str
    reload: Reload
    rule: Rule | None
    secret: bool  # never shown: not in repr, not in error messages
    unset: str  # if not "": the default means "unset", described so; the example shows it commented
    example: object  # the value the example shows for an unset key or an [agents.<id>] key


_META = "compactd"


def key(
    *,
    default: Any,
    doc: str,
    reload: Reload = Reload.HOT,
    rule: Rule | None = None,
    secret: bool = False,
    unset: str = "",
    example: object = None,
) -> Any:
    """Declare one configuration key (a dataclass field of a :func:`section`)."""
    meta = KeyMeta(doc, reload, rule, secret, unset, example)
    return field(default=default, repr=not secret, metadata={_META: meta})


_C = TypeVar("_C")


@dataclass_transform(frozen_default=True, field_specifiers=(key, field))
def section(cls: type[_C]) -> type[_C]:
    """A table of the configuration file: a frozen dataclass whose fields are :func:`key` calls."""
    return dataclass(frozen=True)(cls)


@dataclass(frozen=True)
class KeySpec:
    """One key as declared above: its table ("agents" for [agents.<id>]), name, type and metadata."""

    table: str
    name: str
    type: type
    default: Any
    meta: KeyMeta

    @property
    def dotted(self) -> str:
        return f"{self.table}.{self.name}"


def specs_of(table: str, cls: type[Any]) -> dict[str, KeySpec]:
    hints = typing.get_type_hints(cls)
    out: dict[str, KeySpec] = {}
    for f in dataclasses.fields(cls):
        args = [a for a in typing.get_args(hints[f.name]) if a is not type(None)]  # X | None -> X
        out[f.name] = KeySpec(table, f.name, args[0] if args else hints[f.name], f.default, f.metadata[_META])
    return out
