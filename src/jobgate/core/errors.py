"""The error hierarchy. Every refusal names the thing that was refused and the rule.

Faces (CLI, API) turn these into one clear line or one JSON error shape; they never need to
parse messages, because the code, field and source are attributes.
"""

from __future__ import annotations

from collections.abc import Mapping


class JobgateError(Exception):
    """Base class: ``code`` is stable and machine-readable, the message is for people."""

    code = "jobgate_error"

    def __init__(self, message: str, *, field: str | None = None, source: str | None = None) -> None:
        self.message = message
        self.field = field
        self.source = source
        parts = [p for p in (source, field) if p]
        super().__init__(f"{': '.join(parts)}: {message}" if parts else message)


class ValidationError(JobgateError):
    """Bad input: a definition, a parameter, a configuration key."""

    code = "validation_error"


class ConfigurationError(ValidationError):
    code = "configuration_error"


class UnusableReferenceError(ValidationError):
    """A well-formed request about a record whose reference can no longer be used: its
    definition was retired or removed, its schedule deleted (the seed 001 retry contract).
    400 at the API, where other invalid input is 422."""

    code = "unusable_reference"


class NotReadyError(JobgateError):
    """The database is not there or not at this version's schema: nothing was created or
    changed implicitly; the message says which command does it (``jobgate init``, ``migrate``)."""

    code = "not_ready"


class UnavailableError(JobgateError):
    """A service jobgate needs cannot be reached (the database): the message names where and
    why. Command lines exit 69 (EX_UNAVAILABLE) for it, not 70 (an internal error)."""

    code = "unavailable"
    passes = True  # a try later may succeed (the API says when: Retry-After); False: only a restart cures it


class NotFoundError(JobgateError):
    code = "not_found"


class ConflictError(JobgateError):
    """The request is valid but the current state forbids it (wrong state, key reuse)."""

    code = "conflict"


class GovernanceRefusal(JobgateError):
    """A governance rule refused this (403 at the API): nothing is stored or run, and the
    refusal itself is written to the audit log. ``code`` names the rule family
    (``definition_not_approved``, ``safe_mode_active``, ...); ``rule`` the exact rule."""

    code = "governance_refused"

    def __init__(self, message: str, *, code: str, rule: str | None = None, field: str | None = None) -> None:
        super().__init__(message, field=field)
        self.code = code
        self.rule = rule


class MalformedRecordError(ConflictError):
    """A stored record that cannot be read as what it claims to be (a payload that is not JSON,
    a time that is not a number): it was written by something other than jobgate. ``source``
    names the record (``audit entry 12 of acme``), ``field`` the column."""

    code = "record_malformed"


class QuotaExceededError(JobgateError):
    """A tenant used up a configured allowance (runs per day); nothing was stored."""

    code = "quota_exceeded"


class IllegalTransitionError(ConflictError):
    code = "illegal_transition"


class LeaseLostError(ConflictError):
    """A worker wrote with a fencing token that is no longer current: its lease was taken over."""

    code = "lease_lost"


class NonRetryableError(Exception):
    """Raised by a job handler to say: retrying cannot help (bad input, refused by the target).

    ``error_code`` is recorded on the run and in the dead letter.
    """

    def __init__(self, message: str, *, error_code: str = "NON_RETRYABLE") -> None:
        super().__init__(message)
        self.error_code = error_code


class RetryableError(Exception):
    """Raised by a job handler to name the error code of a failure worth retrying."""

    def __init__(self, message: str, *, error_code: str = "RETRYABLE") -> None:
        super().__init__(message)
        self.error_code = error_code


def refuse_bytes(values: Mapping[str, object], source: str) -> None:
    """Refuse a record read with bytes where jobgate writes text (``MalformedRecordError``,
    naming the column): SQLite stores whatever a direct write gives a column, and such a value
    crashed every command and route that showed it (found by a review: ``runs show``, ``runs
    list``, ``replay``, ``GET /runs`` answered "internal"). Asked where records are shown,
    replayed or exported, not on the worker's path (PostgreSQL refuses bytes in text)."""
    for name, value in values.items():
        if isinstance(value, bytes | bytearray | memoryview):
            raise MalformedRecordError("holds bytes, not text", field=name, source=source)
