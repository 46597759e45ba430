#!/usr/bin/env python3
"""Run the cugemm8 benchmark from a checkout: ``python scripts/bench.py [--quick] [--only dense] ...``
(the same as ``python -m cugemm8 bench``; see cugemm8/bench.py for the options)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cugemm8.bench import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
