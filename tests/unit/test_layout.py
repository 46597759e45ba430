"""CPU tier: the kernel's A-scale layout rule (cugemm8.layout): the aligned leading dimension and the
recognition of arrays already in that layout."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from array_infos import BASE_PTR, info
from cugemm8.layout import get_tma_aligned_size, is_tma_aligned

SETTINGS = settings(max_examples=60, deadline=None)


def test_get_tma_aligned_size():
    assert [get_tma_aligned_size(x, 4) for x in (0, 1, 3, 4, 5, 8, 130)] == [0, 4, 4, 4, 8, 8, 132]
    assert get_tma_aligned_size(5, 2) == 8
    assert get_tma_aligned_size(17, 1) == 32
    with pytest.raises(ValueError):
        get_tma_aligned_size(5, 3)


@SETTINGS
@given(m=st.integers(1, 600), kb=st.integers(1, 60), groups=st.integers(1, 5))
def test_is_tma_aligned(m, kb, groups):
    am = get_tma_aligned_size(m, 4)
    assert is_tma_aligned(info((m, kb), np.float32, (1, am)))
    assert is_tma_aligned(info((groups, m, kb), np.float32, (am * kb, 1, am)))
    assert not is_tma_aligned(info((m, kb), np.float32, (1, am), ptr=BASE_PTR + 4))
    assert not is_tma_aligned(info((m, kb), np.float16, (1, am)))
    if kb > 1:
        assert not is_tma_aligned(info((m, kb), np.float32, (1, am + 4)))
        if m > 1:
            assert not is_tma_aligned(info((m, kb), np.float32))  # row-major
    if groups > 1:
        assert not is_tma_aligned(info((groups, m, kb), np.float32, (am * kb + 4, 1, am)))
