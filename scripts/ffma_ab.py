#!/usr/bin/env python3
"""A/B of the FFMA interleave patch: ``python scripts/ffma_ab.py ...`` = ``python -m benchmarks.ffma_ab ...`` (options there)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.ffma_ab import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
