#!/usr/bin/env python3
"""The benchmark tables from a checkout: ``python scripts/bench.py [--quick] ...`` = ``python -m benchmarks``."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.__main__ import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
