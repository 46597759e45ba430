import os
import sys

from hypothesis import Phase, settings

sys.path.insert(0, os.path.dirname(__file__))  # tests/gpu.py

# On the lent GPU machine time is short: report the first failing example instead of shrinking it.
settings.register_profile("no-shrink", phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target])
if os.environ.get("CUGEMM8_NO_SHRINK"):
    settings.load_profile("no-shrink")
