"""Submit a reconciliation from application code and print its typed result.

``python app.py`` talks to the jobgate server at ``$JOBGATE_SERVER`` (default
``http://127.0.0.1:8080``) with the token in ``$JOBGATE_TOKEN``, the same variables the
``jobgate`` command reads. It lives outside the ``quickstart`` package on purpose: the jobs'
approval binds every file of their package, so editing this script changes no approved code.
It exits 0 when the run completed and the books match, 1 otherwise.
"""

from __future__ import annotations

import os
import sys
from datetime import date
from decimal import Decimal

from quickstart.jobs import Currency, Reconciliation, reconcile_account

import jobgate


def main() -> int:
    url = os.environ.get("JOBGATE_SERVER", "http://127.0.0.1:8080")
    token = os.environ.get("JOBGATE_TOKEN")
    if not token:
        print("set JOBGATE_TOKEN to a token of role activator or above (jobgate tokens create)", file=sys.stderr)
        return 2
    with jobgate.Client(url, token) as jg:
        params = {
            "account": "FR7630001",
            "day": date(2026, 12, 1),
            "expected": Decimal("200.00"),
            "currency": Currency.EUR,
        }
        run = jg.submit(
            reconcile_account,  # the decorated function: its definition id is the job
            params,
            idempotency_key="reconcile-FR7630001-2026-12-01",
        )
        done = jg.wait(run.job_run_id, timeout=60)
        print(f"run {done.job_run_id}: {done.status}")
        if done.status != jobgate.RunStatus.COMPLETED:
            return 1
        result = jg.result(done.job_run_id, Reconciliation)
        print(
            f"{result.account} {result.day}: booked {result.booked} {result.currency.value}, "
            f"expected {result.expected}, matches={result.matches}"
        )
        return 0 if result.matches else 1


if __name__ == "__main__":
    sys.exit(main())
