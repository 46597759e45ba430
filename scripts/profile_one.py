#!/usr/bin/env python3
"""One GEMM call for a profiler: ``python scripts/profile_one.py ...`` = ``python -m benchmarks.profile_one ...`` (options there)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.profile_one import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
