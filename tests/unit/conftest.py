"""Fixtures of the SASS-decoder and FFMA-patch tests: the real kernels of sass_oracle.CONFIGS."""
import pytest

from sass_oracle import CONFIGS, compile_named, listing


@pytest.fixture(scope="module")
def cubins():
    return {name: compile_named(name) for name in CONFIGS}


@pytest.fixture(scope="module")
def listings():
    return {name: listing(name) for name in CONFIGS}
