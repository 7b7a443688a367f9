#!/usr/bin/env python3
"""Run every seed 000 §8 workflow example end to end and print each outcome.

    python examples/run_all.py [--dir DIR] [--db URL] [--timeout 60] [--only EXAMPLE] [--keep]

Exit status 0 when every workflow ended as its example expects, 1 otherwise. See README.md.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # the step handlers: jobgate_examples.*

from jobgate_examples.runner import main

if __name__ == "__main__":
    sys.exit(main())
