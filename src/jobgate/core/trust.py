"""The trust gates' judgement (seed 004): a definition that declares ``permissions`` runs only
if an offline licence and an online environment check both cover them.

Pure: the licence as read, the environment's answer and the time come in as values; reading
the file and calling the endpoint are the shell's (``jobgate.governance.trust``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from jobgate.core.errors import GovernanceRefusal


@dataclass(frozen=True)
class Licence:
    licence_id: str
    holder: str
    permissions: frozenset[str]
    expires_at: datetime
    max_concurrent_runs: int | None


@dataclass(frozen=True)
class LicenceState:
    """What reading the licence gave: the licence, or why there is none usable."""

    licence: Licence | None
    problem: str | None = None


def verdict(
    permissions: Sequence[str], state: LicenceState, environment: frozenset[str] | None, now: datetime
) -> GovernanceRefusal | None:
    """Why the gates refuse ``permissions`` (the first reason, naming its rule), or None."""
    needed = sorted(set(permissions))
    if not needed:
        return None
    lic = state.licence
    if lic is None:
        return _refused(f"no valid licence: {state.problem}", "licence_missing")
    if now >= lic.expires_at:
        return _refused(f"licence {lic.licence_id} expired at {lic.expires_at.isoformat()}", "licence_expired")
    for p in needed:
        if p not in lic.permissions:
            return _refused(f"licence {lic.licence_id} does not grant {p!r}", f"licence_permission:{p}")
    if environment is None:
        return _refused("the environment check cannot be reached (fail closed)", "environment_unreachable")
    for p in needed:
        if p not in environment:
            return _refused(f"the environment does not grant {p!r}", f"environment_permission:{p}")
    return None


def _refused(message: str, rule: str) -> GovernanceRefusal:
    return GovernanceRefusal(message, code="trust_gate_refused", rule=rule, field="permissions")
