from __future__ import annotations

import sys
from pathlib import Path

# The definitions the tests apply name handlers by module, as a deployment would.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "service"))
