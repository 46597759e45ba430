#!/usr/bin/env python3
"""First-contact check of the GEMM kernels on a GPU: ``python scripts/smoke.py ...`` = ``python -m benchmarks.smoke ...`` (options there)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.smoke import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
