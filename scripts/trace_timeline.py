#!/usr/bin/env python3
"""Per-CTA timelines of traced kernels: ``python scripts/trace_timeline.py ...`` = ``python -m benchmarks.trace ...`` (options there)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.trace import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
