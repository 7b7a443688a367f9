"""Which retry and timeout policy governs a run: the one it was admitted under, else the named one.

A run binds its retry policy at creation (``JobRun.bound_retry_policy``), so editing a named
policy in ``jobgate.yaml`` changes new runs, never runs already admitted; the worker and the
rescuer settle with the bound one, and an audit replay reads it off the record.
"""

from __future__ import annotations

import logging

from jobgate.config import JobgateConfig
from jobgate.core.errors import JobgateError, ValidationError
from jobgate.core.models import JobDefinition, JobRun
from jobgate.core.policies import BUILTIN_RETRY_POLICIES, RetryPolicy, TimeoutPolicy

log = logging.getLogger("jobgate.policies")

_bound_policies: dict[int, tuple[object, RetryPolicy]] = {}


def retry_policy(config: JobgateConfig, policy_id: str) -> RetryPolicy:
    """The named retry policy of ``config``; an unknown name is invalid input."""
    try:
        return config.retry_policies[policy_id]
    except KeyError:
        raise ValidationError(f"unknown retry policy {policy_id!r}", field="retry_policy") from None


def timeout_policy(config: JobgateConfig, policy_id: str | None) -> TimeoutPolicy | None:
    """The named timeout policy of ``config`` (None: the run has no timeout)."""
    if policy_id is None:
        return None
    try:
        return config.timeout_policies[policy_id]
    except KeyError:
        raise ValidationError(f"unknown timeout policy {policy_id!r}", field="timeout_policy") from None


def policies_for(config: JobgateConfig, definition: JobDefinition) -> tuple[RetryPolicy, TimeoutPolicy | None]:
    """The policies a new run of ``definition`` is admitted under."""
    return retry_policy(config, definition.retry_policy), timeout_policy(config, definition.timeout_policy)


def run_retry_policy(config: JobgateConfig, run: JobRun) -> RetryPolicy:
    """The retry policy a run was admitted under (bound at creation), else the named one."""
    if run.bound_retry_policy is None:
        return retry_policy(config, run.retry_policy)
    # Rows decoded by the store share one document per distinct policy (codec.shared_loads), so
    # the identity of the document is a cheap cache key; the entry keeps the document alive so
    # its id cannot be reused while cached.
    doc = run.bound_retry_policy
    cached = _bound_policies.get(id(doc))
    if cached is not None and cached[0] is doc:
        return cached[1]
    policy = RetryPolicy.from_dict(dict(doc), source=f"run {run.job_run_id}")
    if len(_bound_policies) >= 1024:
        _bound_policies.clear()
    _bound_policies[id(doc)] = (doc, policy)
    return policy


def settling_policy(config: JobgateConfig, run: JobRun) -> RetryPolicy:
    """The policy that settles an attempt of ``run``. A run whose policy can no longer be
    resolved still has to end (never hold a lease forever): it settles with no retry."""
    try:
        return run_retry_policy(config, run)
    except JobgateError:
        log.exception(
            "run %s: retry policy %s cannot be resolved; settling without retry", run.job_run_id, run.retry_policy
        )
        return BUILTIN_RETRY_POLICIES["no_retry_v1"]
