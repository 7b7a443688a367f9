from __future__ import annotations

import sys
from pathlib import Path

# Worker threads import handlers by module name, exactly as a deployment would.
sys.path.insert(0, str(Path(__file__).resolve().parent))
