#!/usr/bin/env python3
"""The dense configuration sweep: ``python scripts/tune.py ...`` = ``python -m benchmarks.tune ...`` (options there)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.tune import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
