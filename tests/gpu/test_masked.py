"""GPU tier, masked layout (m_grouped_matmul_masked): the kernel against a float64 reference."""
import cupy
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopper import requires_hopper
from problems import BF16, PROPERTY_SETTINGS, check_against_reference, make_masked, poisoned

import cugemm8
from cugemm8 import fp8_gemm

pytestmark = [pytest.mark.gpu, requires_hopper]


@PROPERTY_SETTINGS
@given(groups=st.integers(1, 40), max_m=st.sampled_from([1, 40, 64, 100, 128, 256, 384, 1000]),
       n=st.sampled_from([24, 128, 1024, 4096]), k=st.sampled_from([128, 512, 7168]), data=st.data(),
       seed=st.integers(0, 2**31 - 1), expected=st.integers(1, 1024))
def test_masked_property(groups, max_m, n, k, data, seed, expected):
    masked = data.draw(st.lists(st.integers(0, max_m), min_size=groups, max_size=groups))
    x, w, a, sa, b, sb = make_masked(groups, max_m, n, k, seed)
    out = poisoned((groups, max_m, n))
    mm = cupy.asarray(np.array(masked, dtype=np.int32))
    cugemm8.m_grouped_matmul_masked(a, sa, b, sb, mm, expected, out=out)
    for g, r in enumerate(masked):
        rest = out[g, r:].view(cupy.uint16)
        assert bool((rest == 0xFFFF).all()), f"group {g}: rows at or past masked_m={r} were written"
        if r:
            check_against_reference(out[g, :r], a[g, :r], sa[g, :r], b[g], sb[g], x[g, :r], w[g])


def test_masked_cuda_graph_replay_reads_masked_m_on_device():
    groups, max_m, n, k = 4, 256, 512, 1024
    x, w, a, sa, b, sb = make_masked(groups, max_m, n, k, seed=3)
    sa_aligned = cugemm8.get_col_major_tma_aligned_tensor(sa)
    mm = cupy.asarray(np.array([10, 0, 200, 64], dtype=np.int32))
    out = cupy.zeros((groups, max_m, n), dtype=BF16)
    cupy.cuda.Device().synchronize()   # the inputs come from the legacy stream, which `stream` does not wait for
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        cugemm8.m_grouped_matmul_masked(a, sa_aligned, b, sb, mm, 128, out=out)  # compile + load first
        stream.begin_capture()
        cugemm8.m_grouped_matmul_masked(a, sa_aligned, b, sb, mm, 128, out=out)
        graph = stream.end_capture()
    for masked in ([10, 0, 200, 64], [256, 5, 0, 129]):
        with stream:  # the new counts and the cleared output, ordered before the replay on its stream
            mm[...] = cupy.asarray(np.array(masked, dtype=np.int32))
            out.fill(0)
        graph.launch(stream)
        stream.synchronize()
        for g, r in enumerate(masked):
            if r:
                check_against_reference(out[g, :r], a[g, :r], sa[g, :r], b[g], sb[g], x[g, :r], w[g])
            assert bool((out[g, r:].view(cupy.uint16) == 0).all())


# ----------------------------------------------------------------------------- split last wave
# A last wave that would leave at least half of the CTAs idle is split in k over the two CTAs of a
# cluster (each pushes the partial sums of the peer's column half into the peer's shared memory and
# stores its own half). Run it
# on small grids, with tile counts that give every case: all tiles split, full waves then a split
# tail, a tail too large to split, and no tail. Odd k-block counts split unevenly.
def _split_case(total, grid):
    tail = total % grid
    if tail == 0:
        return "no tail"
    if 2 * tail > grid:
        return "tail too large"
    return "all split" if total < grid else "split tail"


@pytest.mark.parametrize("bm, bn, k", [(128, 128, 1024), (256, 128, 384), (64, 64, 256), (128, 144, 640)])
def test_masked_split_last_wave(bm, bn, k):
    from cugemm8.heuristics import can_split_tail, make_config

    groups, grid, n = 3, 8, bn
    assert can_split_tail(bn, k)
    cfg = make_config("masked", n, k, groups, bm, bn, tail_split=True)
    max_m = 8 * bm
    x, w, a, sa, b, sb = make_masked(groups, max_m, n, k, seed=bm + bn + k)
    sa_aligned = cugemm8.get_col_major_tma_aligned_tensor(sa)
    draws = [[2 * bm - 3, 0, 1], [5 * bm - 3, 0, 5 * bm], [7 * bm - 3, 0, 7 * bm], [8 * bm, 0, 8 * bm - 1],
             [bm, 1, 0]]
    cases = set()
    for masked in draws:
        total = sum(-(-r // bm) for r in masked)  # tiles: one n-block
        cases.add(_split_case(total, grid))
        out = poisoned((groups, max_m, n))
        mm = cupy.asarray(np.array(masked, dtype=np.int32))
        run = fp8_gemm.bind(cfg, a, sa_aligned, b, sb, out, layout=mm, grid=grid)
        run()
        again = poisoned((groups, max_m, n))
        run(out=again)
        assert bool((again.view(cupy.uint16) == out.view(cupy.uint16)).all()), "same inputs, other bits"
        for g, r in enumerate(masked):
            assert bool((out[g, r:].view(cupy.uint16) == 0xFFFF).all()), (masked, g)
            if r:
                check_against_reference(out[g, :r], a[g, :r], sa[g, :r], b[g], sb[g], x[g, :r], w[g])
    assert cases == {"all split", "split tail", "tail too large", "no tail"}


def test_masked_light_last_blocks_go_last():
    # A last m-block of at most 64 valid rows is about half a tile's work. When the last wave is no larger
    # than one m-block's tiles and the last group holding tiles ends in such a block, the kernel runs
    # that block's tiles last (split, when the last wave is small enough). Every tile must still be
    # computed once, reordered or not.
    from cugemm8.heuristics import make_config

    groups, grid, bm, bn, k = 3, 8, 128, 128, 1024
    n_blocks = 5
    n = n_blocks * bn
    cfg = make_config("masked", n, k, groups, bm, bn, tail_split=True)
    max_m = 3 * bm
    x, w, a, sa, b, sb = make_masked(groups, max_m, n, k, seed=77)
    sa_aligned = cugemm8.get_col_major_tma_aligned_tensor(sa)
    draws = [[300, 0, 20], [192, 0, 0], [64, 0, 0], [384, 384, 260], [0, 0, 276], [129, 65, 0], [1, 1, 1]]
    cases = set()
    for masked in draws:
        total = sum(-(-r // bm) for r in masked) * n_blocks
        last_rows = [r for r in masked if r][-1]
        reordered = 0 < last_rows % bm <= 64 and 0 < total % grid <= n_blocks
        cases.add((reordered, _split_case(total, grid)))
        out = poisoned((groups, max_m, n))
        fp8_gemm.bind(cfg, a, sa_aligned, b, sb, out, layout=cupy.asarray(np.array(masked, dtype=np.int32)),
                      grid=grid)()
        for g, r in enumerate(masked):
            assert bool((out[g, r:].view(cupy.uint16) == 0xFFFF).all()), (masked, g)
            if r:
                check_against_reference(out[g, :r], a[g, :r], sa[g, :r], b[g], sb[g], x[g, :r], w[g])
    assert {(True, "split tail"), (True, "tail too large"), (False, "tail too large")} <= cases, cases


# ----------------------------------------------------------------------------- TMA multicast
def test_multicast_cluster_of_two_masked():
    from cugemm8.heuristics import make_config

    groups, max_m, n, k = 3, 300, 512, 1024
    cfg = make_config("masked", n, k, groups, 256, 128, cluster=2)
    x, w, a, sa, b, sb = make_masked(groups, max_m, n, k, seed=11)
    masked = [300, 17, 0]
    out = poisoned((groups, max_m, n))
    mm = cupy.asarray(np.array(masked, dtype=np.int32))
    fp8_gemm.bind(cfg, a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb, out, layout=mm)()
    for g, r in enumerate(masked):
        assert bool((out[g, r:].view(cupy.uint16) == 0xFFFF).all())
        if r:
            check_against_reference(out[g, :r], a[g, :r], sa[g, :r], b[g], sb[g], x[g, :r], w[g])
