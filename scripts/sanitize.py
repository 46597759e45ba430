#!/usr/bin/env python3
"""Every kernel configuration under compute-sanitizer: ``python scripts/sanitize.py ...`` = ``python -m benchmarks.sanitize ...`` (options there)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.sanitize import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
