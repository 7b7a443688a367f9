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

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field

from jobgate.core.addresses import shown_url
from jobgate.core.canonical import canonical_json, digest


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


# Parts whose literal setting may be a secret (a runner's environment: API keys; an HTTP
# target's URL: a password, a key in the query, a webhook's path). An identity binds them by
# digest, never by value: an approval, its audit entry and every evidence bundle that carries
# it are kept for good, and are read by auditors and operators, not only by administrators.
ENVIRONMENT = "environment"  # variable name -> sha256 of its value
URL = "url"  # scheme://host[:port] of the target, for the approver to read
URL_DIGEST = "url_sha256"  # the whole URL, bound
_LEGACY_ENV = "env"  # identities recorded before: the values themselves


def value_digest(value: str) -> str:
    return "sha256:" + hashlib.sha256(value.encode("utf-8")).hexdigest()


def environment_part(env: Mapping[str, str]) -> str:
    """A runner's environment as an identity part: each variable's name, its value's digest."""
    return canonical_json({name: value_digest(value) for name, value in env.items()}).decode()


def url_parts(url: str) -> dict[str, str]:
    """An HTTP target's URL as identity parts: what may be shown of it, and its digest."""
    return {URL: shown_url(url), URL_DIGEST: value_digest(url)}


def protected(parts: Mapping[str, str]) -> dict[str, str]:
    """``parts`` with the secret-bearing settings of identities recorded before they were
    digested (a runner's ``env`` as values, an HTTP target's whole ``url``) in today's form:
    the same code, named without its secrets, so an approval recorded then still matches the
    code a worker reads now. Today's identities are returned unchanged."""
    out = dict(parts)
    legacy_env = out.pop(_LEGACY_ENV, None)
    if legacy_env is not None:
        try:
            env = json.loads(legacy_env)
        except ValueError:
            env = None
        if isinstance(env, dict) and all(isinstance(v, str) for v in env.values()):
            out[ENVIRONMENT] = environment_part(env)
        else:  # not what jobgate wrote: kept as it is, so it shows as a changed part
            out[_LEGACY_ENV] = legacy_env
    if URL in out and URL_DIGEST not in out and out.get("method") == "POST":
        out.update(url_parts(out[URL]))
    return out
