"""GPU tier, contiguous layout (m_grouped_matmul_contiguous): the kernel against a float64 reference."""
import cupy
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hopper import requires_hopper
from problems import PROPERTY_SETTINGS, check_against_reference, make_contiguous, poisoned, quantize

import cugemm8
from cugemm8 import fp8_gemm

pytestmark = [pytest.mark.gpu, requires_hopper]


@PROPERTY_SETTINGS
@given(groups=st.integers(1, 12), data=st.data(), n=st.sampled_from([64, 136, 512, 2048]),
       k=st.sampled_from([128, 400, 1024, 2048]), seed=st.integers(0, 2**31 - 1))
def test_contiguous_property(groups, data, n, k, seed):
    rows = data.draw(st.lists(st.integers(0, 700), min_size=groups, max_size=groups))
    if sum(rows) == 0:
        rows[0] = 1
    x, w, a, sa, b, sb, idx = make_contiguous(rows, n, k, seed)
    out = poisoned((a.shape[0], n))
    cugemm8.m_grouped_matmul_contiguous(a, sa, b, sb, idx, out=out)
    idx_h = cupy.asnumpy(idx)
    assert bool((out[cupy.asarray(idx_h < 0)].view(cupy.uint16) == 0).all()), "padding rows must be zero"
    for g in range(groups):
        sel = np.nonzero(idx_h == g)[0]
        if len(sel) == 0:
            continue
        rs = slice(int(sel[0]), int(sel[-1]) + 1)
        check_against_reference(out[rs], a[rs], sa[rs], b[g], sb[g], x[rs], w[g])


# ------------------------------------------------------------------ contiguous tiles over 64-row segments
# Expert segments start at multiples of 64, so a tile of 128 or 256 rows may hold several experts:
# the kernel runs one pass per run of 64-row slabs with the same expert. Run every tile height
# explicitly (the heuristic keeps 256-row tiles for large experts) over segments that split tiles into
# two, three and four passes, with empty experts, padding slabs and ids past the last expert.
def _check_contiguous_segments(bm, bn, n, k, grid=None, more=(), share_b=False):
    from cugemm8.heuristics import make_config

    groups = 5
    cfg = make_config("contiguous", n, k, groups, bm, bn, cluster=2 if share_b else 1, share_b=share_b)
    # (expert, rows) in order; every segment padded to 64 with -1. Expert 9 is past the last (padding).
    segments = [(0, 50), (1, 64), (2, 1), (3, 64), (9, 64), (4, 200), (1, 0), (0, 130), (3, 7), (2, 64), *more]
    idx = []
    for g, r in segments:
        idx += [g] * r + [-1] * (-(-r // 64) * 64 - r)
    idx = np.array(idx, dtype=np.int32)
    idx[idx.size - 64 + 5] = 7  # a row inside a valid slab with an id past the last expert: zeros
    m = idx.size
    rng = cupy.random.default_rng(bm + n + k)
    x = rng.standard_normal((m, k), dtype=cupy.float32)
    w = rng.standard_normal((groups, n, k), dtype=cupy.float32)
    a, sa, b, sb = quantize(x, w)
    out = poisoned((m, n))
    fp8_gemm.bind(cfg, a, cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb, out, layout=cupy.asarray(idx),
                  grid=grid)()
    expert_rows = (idx >= 0) & (idx < groups)
    assert bool((out[cupy.asarray(~expert_rows)].view(cupy.uint16) == 0).all()), "non-expert rows must be zero"
    for g in range(groups):
        rows = cupy.asarray(np.nonzero(idx == g)[0])
        check_against_reference(out[rows], a[rows], sa[rows], b[g], sb[g], x[rows], w[g])


@pytest.mark.parametrize("bm, bn, n", [(256, 128, 256), (128, 128, 256), (64, 64, 256), (128, 160, 688),
                                       (128, 144, 1200), (128, 256, 600)])
def test_contiguous_tiles_spanning_experts(bm, bn, n):
    _check_contiguous_segments(bm, bn, n, 384)


# 128x256 tiles in column halves (the uneven experts' pick): the segments above, several tiles a CTA through the
# stage ring from every stage, a last n-tile of 88 columns.
@pytest.mark.parametrize("k", [640, 2048])
def test_contiguous_column_halves_through_the_ring(k):
    _check_contiguous_segments(128, 256, 600, k, grid=2, more=[(1, 1024), (4, 256)])


# 256x128 contiguous tiles walk the stage ring in rounds from wherever the previous tile left it (rolled
# k-blocks up to stage 0, rounds, rolled k-blocks). With k-blocks not a multiple of the 3 stages and two
# CTAs for 18 tiles, tiles start at every stage: tiles of several experts, and whole tiles (the extra
# segments at the end).
@pytest.mark.parametrize("k", [640, 2048])
def test_contiguous_ring_rounds_from_every_stage(k):
    _check_contiguous_segments(256, 128, 256, k, grid=2, more=[(1, 1024), (4, 256)])


# 256-row tiles over segments padded to 128 rows, uneven, with empty experts: many tiles are split between two experts
# at their middle (a pass for each, each warpgroup with one slab in each), next to whole ones and ones with padding
# slabs; a grid of two CTAs walks them all; bitwise the same on a repeat.
@pytest.mark.parametrize("bn, grid", [(128, None), (96, 2)])
def test_contiguous_tiles_split_at_the_middle(bn, grid):
    from cugemm8.heuristics import make_config

    rows = [300, 200, 0, 130, 512, 100, 90, 256, 383, 1, 128, 700]
    n, k = 2 * bn + 40, 640
    x, w, a, sa, b, sb, idx = make_contiguous(rows, n, k, seed=bn, align=128)
    split = sum(1 for r in range(0, idx.size - 128, 256) if int(idx[r]) >= 0 and int(idx[r + 128]) >= 0
                and int(idx[r]) != int(idx[r + 128]))
    assert split >= 4, split
    out = poisoned((a.shape[0], n))
    run = fp8_gemm.bind(make_config("contiguous", n, k, len(rows), 256, bn), a,
                        cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb, out, layout=idx, grid=grid)
    run()
    idx_h = cupy.asnumpy(idx)
    assert bool((out[cupy.asarray(idx_h < 0)].view(cupy.uint16) == 0).all()), "padding rows must be zero"
    for g in range(len(rows)):
        sel = cupy.asarray(np.nonzero(idx_h == g)[0])
        if sel.size:
            check_against_reference(out[sel], a[sel], sa[sel], b[g], sb[g], x[sel], w[g])
    first = out.copy()
    run()
    assert bool((first.view(cupy.uint16) == out.view(cupy.uint16)).all()), "not repeatable"


# CTA pairs sharing B (KernelConfig.share_b): where a pair's two m-blocks are one pass of one expert, each CTA loads
# half of the B tile into both; otherwise each loads its own, and the CTA with fewer passes walks the stages of the
# other's extra ones. The segments give every case (two-pass tiles beside one-pass ones, padding, experts past the last,
# an odd last m-block whose peer is past M: 17 m-blocks); a grid of one pair walks them all through one ring.
@pytest.mark.parametrize("bn, n, k, grid", [(192, 400, 384, None), (160, 688, 640, 2), (128, 256, 2048, 2),
                                            (144, 1200, 384, None), (256, 600, 640, 2)])
def test_contiguous_pairs_sharing_b(bn, n, k, grid):
    _check_contiguous_segments(128, bn, n, k, grid=grid, more=[(1, 1024), (4, 256)], share_b=True)


# fp8_gemm.bind's callable launches with m_indices' pointer: it must keep the array alive. Before it did, a layout
# that only the callable saw was freed, the next allocation of its size took its memory, and the probes timed tiles
# with no expert (NOTES.md v41). Here the freed block is refilled with -1 before the launch.
def test_bind_keeps_its_layout_alive():
    from cugemm8.heuristics import make_config

    rows, n, k = [300, 200, 0, 500], 256, 512
    x, w, a, sa, b, sb, idx = make_contiguous(rows, n, k, seed=3, align=128)
    out = poisoned((a.shape[0], n))
    run = fp8_gemm.bind(make_config("contiguous", n, k, len(rows), 128, 128), a,
                        cugemm8.get_col_major_tma_aligned_tensor(sa), b, sb, out, layout=idx.copy())
    refill = [cupy.full(idx.shape, -1, dtype=cupy.int32) for _ in range(4)]
    run()
    idx_h = cupy.asnumpy(idx)
    for g in range(len(rows)):
        sel = cupy.asarray(np.nonzero(idx_h == g)[0])
        if sel.size:
            check_against_reference(out[sel], a[sel], sa[sel], b[g], sb[g], x[sel], w[g])
    del refill
