import os
import sys

from hypothesis import Phase, settings

sys.path.insert(0, os.path.dirname(__file__))  # the shared modules: hopper.py, problems.py, kernel_configs.py, ...

# On the lent GPU machine time is short: report the first failing example instead of shrinking it.
settings.register_profile("no-shrink", phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target])
if os.environ.get("CUGEMM8_NO_SHRINK"):
    settings.load_profile("no-shrink")


# ----------------------------------------------------------------------------- case counters
# Property tests that try many generated cases (tests/test_bad_input.py) count them here, per tier and
# function; the totals are printed in the terminal summary, whatever -s/-q say.
import collections  # noqa: E402

import pytest  # noqa: E402

_CASE_COUNTS = pytest.StashKey[collections.Counter]()


@pytest.fixture(scope="session")
def case_counter(request) -> collections.Counter:
    """A Counter shared by the whole session: ``case_counter["cpu matmul"] += 1`` per case tried."""
    return request.config.stash.setdefault(_CASE_COUNTS, collections.Counter())


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    counts = config.stash.get(_CASE_COUNTS, None)
    if not counts:
        return
    terminalreporter.write_sep("-", f"bad-input cases tried: {sum(counts.values())}")
    for tier in sorted({key.split(" ", 1)[0] for key in counts}):
        parts = [f"{key.split(' ', 1)[1]} {n}" for key, n in sorted(counts.items()) if key.split(" ", 1)[0] == tier]
        terminalreporter.write_line(f"{tier}: {sum(n for key, n in counts.items() if key.split(' ', 1)[0] == tier)} "
                                    f"({', '.join(parts)})")
