#!/usr/bin/env python3
"""The grouped configuration sweep: ``python scripts/tune_grouped.py ...`` = ``python -m benchmarks.tune_grouped ...`` (options there)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.tune_grouped import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
