"""CPU tier, the weight gradients: their argument checks (every argument, before any launch), their heuristic,
and the float64 references."""
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from array_infos import BASE_PTR, a_scale_info, info, kblocks
from cugemm8 import heuristics, heuristics_wgrad, reference
from cugemm8.validation_wgrad import check_k_grouped_wgrad, check_wgrad

M, N, K = 300, 264, 1040


def wgrad_case(m=M, n=N, k=K, kinds=("aligned", "aligned"), out_shape=None, c=None):
    kb = kblocks(k)
    return dict(a=info((m, k), np.uint8), a_scale=a_scale_info(m, kb, kinds[0]), b=info((n, k), np.uint8),
                b_scale=a_scale_info(n, kb, kinds[1]), out=info(out_shape or (m, n), np.float32), c=c)


def grouped_case(groups=4, m=M, n=N, k=K, **kw):
    case = wgrad_case(m, n, k, **kw)
    case["out"] = info(kw.get("out_shape") or (groups, m, n), np.float32)
    return dict(a=case["a"], a_scale=case["a_scale"], b=case["b"], b_scale=case["b_scale"],
                k_sizes=info((groups,), np.int32), out=case["out"], c=case["c"])


def test_valid_calls():
    assert check_wgrad(**wgrad_case(), device=0) == (M, N, K, "aligned", "aligned", False)
    assert check_wgrad(**wgrad_case(kinds=("rowmajor", "rowmajor")), device=0)[3:5] == ("rowmajor", "rowmajor")
    out = info((M, N), np.float32)
    assert check_wgrad(**dict(wgrad_case(), out=out, c=out), device=0)[-1] is False      # c is out
    other = info((M, N), np.float32, ptr=BASE_PTR + (1 << 30))
    assert check_wgrad(**dict(wgrad_case(), c=other), device=0)[-1] is True              # a separate addend
    assert check_wgrad(**wgrad_case(m=0, k=0), device=0)[:3] == (0, N, 0)                 # empty sizes
    assert check_k_grouped_wgrad(**grouped_case(), device=0) == (M, N, K, 4, "aligned", "aligned", False)


def _bad(change):
    case = wgrad_case()
    change(case)
    return case


@pytest.mark.parametrize("change,exc,match", [
    (lambda c: c.update(a=np.zeros(3)), TypeError, "^a must be a CUDA device array"),
    (lambda c: c.update(a=info((M, K), np.float32)), TypeError, "^a must have dtype uint8"),
    (lambda c: c.update(a=info((2, M, K), np.uint8)), ValueError, r"^a must be 2-D \[M, K\]"),
    (lambda c: c.update(b=info((N, K + 16), np.uint8)), ValueError, "^b must have the same K as a"),
    (lambda c: c.update(a=info((M, 1000), np.uint8), b=info((N, 1000), np.uint8)), ValueError,
     "K must be a multiple of 16"),
    (lambda c: c.update(b=info((260, K), np.uint8)), ValueError, "N must be a multiple of 8"),
    (lambda c: c.update(a_scale=info((M, 8), np.float32)), ValueError, r"^a_scale must have shape \[M, ceil\(K/128\)\]"),
    (lambda c: c.update(b_scale=info((kblocks(N), kblocks(K)), np.float32)), ValueError,
     r"^b_scale must have shape \[N, ceil\(K/128\)\] = \(264, 9\)"),     # 128x128 block scales: refused
    (lambda c: c.update(b_scale=info((N, 9), np.float64)), TypeError, "^b_scale must have dtype float32"),
    (lambda c: c.update(a_scale=info((M, 9), np.float32, (2, 600))), ValueError, "^a_scale must be either M-major"),
    (lambda c: c.update(a=info((M, K), np.uint8, (K + 8, 1))), ValueError, "^a row stride must be"),
    (lambda c: c.update(out=None), TypeError, "^out must be a CUDA device array"),
    (lambda c: c.update(out=info((M, N), np.float16)), TypeError, "^out must have dtype float32"),
    (lambda c: c.update(out=info((M, N + 8), np.float32)), ValueError, r"^out must have shape \[M, N\]"),
    (lambda c: c.update(out=info((M, N), np.float32, (N + 2, 1))), ValueError, "^out row stride must be"),
    (lambda c: c.update(out=info((M, N), np.float32, ptr=BASE_PTR + 4)), ValueError, "^out base address must be 16"),
    (lambda c: c.update(c=info((M, N), np.float64)), TypeError, "^c must have dtype float32"),
    (lambda c: c.update(c=info((N, M), np.float32)), ValueError, r"^c must have shape \[M, N\]"),
    (lambda c: c.update(c=info((M, N), np.float32, ptr=BASE_PTR + 4 * N * 16)), ValueError,
     "^c must be out itself or not overlap it"),
    (lambda c: c.update(b=info((N, K), np.uint8, device=1)), ValueError, "^b is on device 1"),
])
def test_wgrad_errors(change, exc, match):
    with pytest.raises(exc, match=match):
        check_wgrad(**_bad(change), device=0)


@pytest.mark.parametrize("change,exc,match", [
    (lambda c: c.update(k_sizes=info((4,), np.int64)), TypeError, "^k_sizes must have dtype int32"),
    (lambda c: c.update(k_sizes=info((4, 1), np.int32)), ValueError, r"^k_sizes must be 1-D \[G\]"),
    (lambda c: c.update(k_sizes=info((0,), np.int32)), ValueError, "^k_sizes must hold at least 1 group"),
    (lambda c: c.update(k_sizes=info((1025,), np.int32)), ValueError, "^k_sizes may hold at most 1024 groups"),
    (lambda c: c.update(k_sizes=info((4,), np.int32, (2,))), ValueError, "^k_sizes must be C-contiguous"),
    (lambda c: c.update(out=info((M, N), np.float32)), ValueError, r"^out must be 3-D \[G, M, N\]"),
    (lambda c: c.update(out=info((3, M, N), np.float32)), ValueError, r"^out must have shape \[G, M, N\] = \(4, "),
    (lambda c: c.update(out=info((4, M, N), np.float32, (M * N + 4, N, 1))), ValueError,
     "^out groups must follow each other without gaps"),
    (lambda c: c.update(c=info((4, M, N), np.float32, ptr=BASE_PTR + 16)), ValueError,
     "^c must be out itself or not overlap it"),
])
def test_k_grouped_errors(change, exc, match):
    case = grouped_case()
    change(case)
    with pytest.raises(exc, match=match):
        check_k_grouped_wgrad(**case, device=0)


# ----------------------------------------------------------------------------- the heuristic
@settings(max_examples=200, deadline=None)
@given(layout=st.sampled_from(heuristics_wgrad.LAYOUTS), m=st.integers(1, 40000), n=st.integers(1, 8192).map(lambda v: 8 * v),
       groups=st.integers(1, 1024), sms=st.integers(1, 144))
def test_wgrad_heuristic_limits(layout, m, n, groups, sms):
    groups = groups if layout == "k_grouped" else 1
    plan = heuristics_wgrad.choose(layout, m, n, groups, sms)
    cfg = plan.config
    assert cfg.wgrad and cfg.k == 0 and cfg.layout == layout and cfg.num_groups == groups
    assert cfg.smem_bytes <= heuristics.SMEM_CAPACITY and cfg.stages >= heuristics_wgrad.MIN_STAGES
    atom_span = cfg.block_m if cfg.transpose_d else cfg.block_n   # D's columns of one tile
    atoms = atom_span * 4 // cfg.swizzle_d
    least = max(2, -(-atoms // 2)) if cfg.transpose_d else 2
    assert cfg.d_atoms == 0 or least <= cfg.d_atoms < atoms   # all atoms held, or enough of them
    assert cfg.block_m in (64, 128) and cfg.num_math_wg == cfg.block_m // 64 and cfg.block_n in heuristics_wgrad.BLOCK_NS
    assert cfg.swizzle_d in (64, 128) and (atom_span * 4) % cfg.swizzle_d == 0
    assert cfg.n == (m if cfg.transpose_d else n)   # the kernel's N: D's columns, or its rows where it computes D^T
    assert cfg.cluster == 1 and cfg.split_k == 1 and not cfg.tail_split
    if cfg.load_d:   # D loaded and stored only over 2 to 4 m-blocks of wide enough tiles, the whole FP32 tile held
        assert 128 < m <= heuristics_wgrad.LOAD_D_ROWS and cfg.block_m == 128 and not cfg.transpose_d
        assert cfg.block_n >= heuristics_wgrad.LOAD_D_COLS and cfg.d_atoms == 0
    assert 1 <= plan.grid <= sms
    assert heuristics_wgrad.choose(layout, m, n, groups, sms) == plan   # deterministic


def test_wgrad_heuristic_picks():
    """The time model on DeepGEMM's weight-gradient shapes (132 SMs): 128x160 with 4 stages beside 4 of its 5 FP32
    output atoms, the rate the H200 sweeps measured highest (NOTES.md v23); 7168x4096 as D^T, 11 waves of tiles
    over 4096x7168 against 12 (NOTES.md v47), with 3 of its 4 transposed atoms."""
    for m, n in ((7168, 2112), (1536, 24576), (2048, 7168), (4096, 7168)):
        cfg = heuristics_wgrad.choose("normal", m, n, 1, 132).config
        assert (cfg.block_m, cfg.block_n, cfg.stages, cfg.d_atoms, cfg.transpose_d) == (128, 160, 4, 4, False)
    plan = heuristics_wgrad.choose("normal", 7168, 4096, 1, 132)
    cfg = plan.config
    assert (cfg.block_m, cfg.block_n, cfg.stages, cfg.d_atoms, cfg.transpose_d, cfg.n) == (128, 160, 4, 3, True, 7168)
    assert plan.num_tiles == 32 * 45 and -(-plan.num_tiles // 132) == 11
    with pytest.raises(ValueError, match="layout must be one of"):
        heuristics_wgrad.choose("masked", 64, 64, 1, 132)
    with pytest.raises(ValueError, match="must be positive"):
        heuristics_wgrad.choose("normal", 0, 64, 1, 132)


def test_wgrad_load_d_picks():
    """load_d where it measured faster (2 to 4 m-blocks, tiles 112 wide or more, D untransposed, as many stages as
    the reduce-add's tile), the reduce-add elsewhere: one m-block, 96-wide tiles, D^T, more rows (NOTES.md v49)."""
    def pick(m, n, layout="normal", groups=1):
        return heuristics_wgrad.choose(layout, m, n, groups, 132).config
    for m, n, bn in ((512, 32768, 144), (200, 7168, 112), (512, 4096, 128), (256, 32768, 128)):
        cfg = pick(m, n)
        assert (cfg.load_d, cfg.block_n, cfg.d_atoms) == (True, bn, 0), (m, n)
        reduce_add = heuristics_wgrad.make_config("normal", n, 1, 128, bn)
        assert cfg.stages == reduce_add.stages
    assert pick(512, 2112, "k_grouped", 8).load_d and pick(256, 4096, "k_grouped", 4).load_d
    for m, n in ((128, 16384), (384, 7168), (300, 4096), (768, 32768), (32768, 512), (7168, 2112)):
        assert not pick(m, n).load_d, (m, n)
    assert not pick(128, 4096, "k_grouped", 8).load_d and not pick(384, 7168, "k_grouped", 4).load_d
    with pytest.raises(ValueError, match="d_atoms must be 0 or 5 with load_d"):
        heuristics_wgrad.make_config("normal", 4096, 1, 128, 160, d_atoms=4, load_d=True)
    assert heuristics_wgrad.make_config("normal", 4096, 1, 128, 160, load_d=True).stages == 3


def test_wgrad_atoms_held():
    """make_config: the FP32 tile held whole where it fits beside 4 stages, else in part; an explicit count of 2 or
    more, all of them as 0; 1 refused (the epilogue fills one atom while TMA reads the other)."""
    assert heuristics_wgrad.make_config("normal", 4096, 1, 128, 128).d_atoms == 0
    cfg = heuristics_wgrad.make_config("normal", 4096, 1, 128, 160)
    assert (cfg.d_atoms, cfg.stages) == (4, 4)
    assert heuristics_wgrad.make_config("normal", 4096, 1, 128, 160, d_atoms=2).stages == 5
    assert heuristics_wgrad.make_config("normal", 4096, 1, 128, 160, d_atoms=5).d_atoms == 0
    with pytest.raises(ValueError, match="d_atoms must be 0"):
        heuristics_wgrad.make_config("normal", 4096, 1, 128, 160, d_atoms=1)
    # Transposed: atoms of 32 of the tile's rows (4 at 128 rows), at least half held (one second round of writes).
    cfg = heuristics_wgrad.make_config("normal", 4096, 1, 128, 160, transpose_d=True)
    assert (cfg.d_atoms, cfg.stages, cfg.swizzle_d) == (3, 4, 128)
    assert heuristics_wgrad.make_config("normal", 4096, 1, 128, 160, d_atoms=4, transpose_d=True).d_atoms == 0
    assert heuristics_wgrad.make_config("normal", 4096, 1, 64, 160, transpose_d=True).d_atoms == 0
    with pytest.raises(ValueError, match="d_atoms must be 0 .* or at least 2"):
        heuristics_wgrad.make_config("normal", 4096, 1, 128, 160, d_atoms=1, transpose_d=True)


@settings(max_examples=300, deadline=None)
@given(m=st.integers(1, 40000), n=st.integers(1, 8192).map(lambda v: 8 * v), sms=st.integers(1, 144))
def test_wgrad_heuristic_is_symmetric(m, n, sms):
    """D = A·Bᵀ and Dᵀ = B·Aᵀ are the same problem: where the choice for M x N computes Dᵀ (tiles over N x M), the
    choice for N x M computes its D itself (tiles over the same N x M cost less untransposed)."""
    plan, mirror = heuristics_wgrad.choose("normal", m, n, 1, sms), heuristics_wgrad.choose("normal", n, m, 1, sms)
    assert not (plan.config.transpose_d and mirror.config.transpose_d)
    if plan.config.transpose_d:
        assert mirror.config.n == plan.config.n == m


# ----------------------------------------------------------------------------- references
def test_references_against_a_direct_computation():
    rng = np.random.default_rng(0)
    m, n, sizes = 5, 7, [128, 0, 256]
    k = sum(sizes)
    a = rng.integers(0, 0x7E, size=(m, k), dtype=np.uint8)   # finite e4m3 codes
    b = rng.integers(0, 0x7E, size=(n, k), dtype=np.uint8)
    sa = rng.uniform(0.5, 2, (m, k // 128)).astype(np.float32)
    sb = rng.uniform(0.5, 2, (n, k // 128)).astype(np.float32)
    from cugemm8.quantize import fp8_e4m3_to_float

    af = fp8_e4m3_to_float(a).astype(np.float64) * np.repeat(sa, 128, axis=1)
    bf = fp8_e4m3_to_float(b).astype(np.float64) * np.repeat(sb, 128, axis=1)
    np.testing.assert_allclose(reference.reference_wgrad(a, sa, b, sb), af @ bf.T)
    grouped = reference.reference_k_grouped_wgrad(a, sa, b, sb, np.array(sizes, np.int32))
    np.testing.assert_allclose(grouped[0], af[:, :128] @ bf[:, :128].T)
    assert not grouped[1].any()
    np.testing.assert_allclose(grouped[2], af[:, 128:] @ bf[:, 128:].T)
