"""Two jobs declared in Python: the decorator is their definition, the annotations their params.

``jobgate apply --module quickstart.jobs`` stores both definitions; an admin approves their
content and this package's code; a worker that can import ``quickstart`` runs them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import date
from decimal import Decimal
from typing import Annotated, Literal

import jobgate
from jobgate import ExecutionContext, Param

# A tiny ledger, so the example needs nothing else: account -> booked amounts per day.
LEDGER: dict[str, dict[date, list[Decimal]]] = {
    "FR7630001": {date(2026, 12, 1): [Decimal("120.50"), Decimal("79.50")]},
    "DE8937040": {date(2026, 12, 1): [Decimal("1000.00")]},
}


class Currency(enum.Enum):
    EUR = "EUR"
    USD = "USD"


@dataclass(frozen=True)
class Reconciliation:
    """What a reconciliation run returns: its result, typed here and JSON in the record."""

    account: str
    day: date
    expected: Decimal
    booked: Decimal
    matches: bool
    currency: Currency


@jobgate.job(
    "QS-RECONCILE-ACCOUNT",
    job_class="AUDIT_INTEGRITY_JOB",
    priority="high",
    description="Compare an account's booked total for a day with the expected total",
)
def reconcile_account(
    ctx: ExecutionContext,
    account: Annotated[str, Param(pattern=r"[A-Z]{2}[0-9]{7}", description="IBAN prefix of the account")],
    day: date,
    expected: Annotated[Decimal, Param(minimum=0)],
    currency: Currency = Currency.EUR,
    mode: Literal["strict", "tolerant"] = "strict",
) -> Reconciliation:
    """Sum the day's bookings and compare them with ``expected`` (exactly, or within a cent)."""
    booked = sum(LEDGER.get(account, {}).get(day, []), Decimal(0))
    tolerance = Decimal("0.01") if mode == "tolerant" else Decimal(0)
    matches = abs(booked - expected) <= tolerance
    print(f"{account} on {day}: booked {booked} {currency.value}, expected {expected}")
    ctx.progress(1.0, "reconciled")
    return Reconciliation(account, day, expected, booked, matches, currency)


@jobgate.job("QS-PURGE-EXPORTS", job_class="MAINTENANCE_JOB")
def purge_exports(older_than_days: Annotated[int, Param(minimum=1, maximum=3650)] = 30) -> dict[str, int]:
    """A job that needs no context: it only reports what it would purge."""
    return {"older_than_days": older_than_days, "purged": 0}
