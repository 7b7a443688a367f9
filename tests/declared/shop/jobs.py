"""Jobs declared with ``@jobgate.job``: every supported annotation, and a typed result."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Annotated, Literal

import jobgate
from jobgate import ExecutionContext, Param


class Region(enum.Enum):
    EU = "eu"
    US = "us"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 2


@dataclass(frozen=True)
class Settled:
    order: str
    total: Decimal
    day: date
    region: Region


@jobgate.job(
    "SHOP-SETTLE",
    job_class="MAINTENANCE_JOB",
    priority="high",
    retry_policy="fixed_delay_v1",
    description="Settle one order",
    code=["package:tests.declared.shop"],
)
def settle(
    ctx: ExecutionContext,
    order: Annotated[str, Param(pattern=r"ORD-[0-9]{4}", description="the order number")],
    total: Annotated[Decimal, Param(minimum=0, maximum="100000")],
    day: date,
    at: datetime,
    rush: bool = False,
    count: int = 1,
    region: Region = Region.EU,
    level: Level = Level.LOW,
    channel: Literal["web", "phone"] = "web",
    note: str | None = None,
) -> Settled:
    ctx.log(f"settling {order}")
    assert isinstance(total, Decimal) and isinstance(day, date) and isinstance(at, datetime)
    assert at.tzinfo is not None and isinstance(rush, bool) and isinstance(count, int)
    assert isinstance(region, Region) and isinstance(level, Level) and channel in ("web", "phone")
    return Settled(order, total * count, day, region)


@jobgate.job("SHOP-PING", job_class="MAINTENANCE_JOB", code=["package:tests.declared.shop"])
def ping() -> None:
    """No parameters, no context."""
