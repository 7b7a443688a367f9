from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
# The worker threads import the engine tests' handlers and the workflow tests' by module name.
for folder in ("service", "runtime", "workflows"):
    sys.path.insert(0, str(HERE.parent / folder))
