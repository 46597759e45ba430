#!/usr/bin/env python3
"""A/B of this checkout against another: ``python scripts/round_robin.py ...`` = ``python -m benchmarks.round_robin ...`` (options there)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.round_robin import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
