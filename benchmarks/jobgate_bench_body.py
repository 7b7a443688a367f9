"""The benchmark job body: the peers harness's ``record`` (one pipelined Redis round trip).

Imported from ``../shared/bench/peers/common.py`` (read, not copied) so jobgate runs exactly
the body every peer runs, and exactly-once is checked the same way (count and bitcount).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

_PEERS = os.environ.get("JOBGATE_PEERS_DIR") or str(Path(__file__).resolve().parents[2] / "shared" / "bench" / "peers")
if _PEERS not in sys.path:
    sys.path.insert(0, _PEERS)

import common  # type: ignore[import-not-found]  # noqa: E402

from jobgate.context import ExecutionContext  # noqa: E402


def record(ctx: ExecutionContext) -> None:
    common.record(int(ctx.params["i"]), float(ctx.params.get("t") or 0.0))
