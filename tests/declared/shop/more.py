"""A second module of the package: ``--module`` on the package reads it too; the re-export of
``settle`` here is not a second job."""

from __future__ import annotations

from tests.declared.shop.jobs import settle

import jobgate

__all__ = ["settle", "tally"]


@jobgate.job("SHOP-TALLY", job_class="OBSERVABILITY_JOB", queue="reports", code=["package:tests.declared.shop"])
def tally(days: int = 7) -> dict[str, int]:
    return {"days": days}
