#!/usr/bin/env python3
"""SASS identity against another checkout: ``python scripts/sass_digests.py ...`` = ``python -m benchmarks.sass_digests ...`` (options there)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.sass_digests import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
