"""Code identity: what a definition executes, as named parts with their digests (pure).

A definition's content digest covers what the definition *says*; its approval also binds a code
digest covering what would *execute*: the source files of a Python handler's package (or the
paths and distributions its ``code:`` list names), a command runner's resolved binary, argument
template and environment, an HTTP target's URL and method. The shell that reads the files
(``jobgate.governance.code``) builds the parts; the digest over them, and which parts differ
between two identities, are decided here, so the approver's host and every worker compute them
alike.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from jobgate.core.canonical import digest


@dataclass(frozen=True)
class CodeIdentity:
    """Named parts (``package:mymodule``, ``binary``, ``args``, ``url`` ...) to their values
    (digests of file contents, or the literal setting); ``digest`` covers all of them."""

    parts: Mapping[str, str] = field(default_factory=dict)

    @property
    def digest(self) -> str:
        return digest(dict(self.parts))

    def as_dict(self) -> dict[str, str]:
        return dict(sorted(self.parts.items()))


def changed_parts(approved: Mapping[str, str], observed: Mapping[str, str]) -> tuple[str, ...]:
    """The names of the parts that differ, appeared or disappeared, in name order."""
    names = set(approved) | set(observed)
    return tuple(sorted(n for n in names if approved.get(n) != observed.get(n)))
