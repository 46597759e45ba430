"""CPU tier, e4m3 output: the argument checks (out_dtype, scale_format, out, out_scale), the heuristic's
tiles for it, and the NumPy reference of its scale rule."""
import numpy as np
import pytest

from array_infos import aligned_strides, info
from cugemm8 import heuristics, validation
from cugemm8.quantize import AMAX_FLOOR, FP8_MAX, per_token_cast_to_fp8_numpy, pow2_ceil, quantize_scale

M, N, K = 100, 256, 512


def fp8_out(shape=(M, N)):
    return info(shape, np.uint8)


def scale(shape=(M, 2)):
    return info(shape, np.float32, aligned_strides(shape))


# ----------------------------------------------------------------------------- out_dtype and scale_format
@pytest.mark.parametrize("out_dtype,scale_format,want", [
    ("bfloat16", "float32", "bfloat16"), ("float8_e4m3", "float32", "float8_e4m3"),
    ("float8_e4m3", "ue8m0", "float8_e4m3_ue8m0")])
def test_out_format(out_dtype, scale_format, want):
    assert validation.check_out_format(out_dtype, scale_format) == want
    assert want in heuristics.OUT_FORMATS


@pytest.mark.parametrize("out_dtype,scale_format,exc,match", [
    ("float16", "float32", ValueError, "^out_dtype must be one of"),
    ("e4m3", "float32", ValueError, "^out_dtype must be one of"),
    (np.float32, "float32", TypeError, "^out_dtype must be a str"),
    ("float8_e4m3", "e8m0", ValueError, "^scale_format must be one of"),
    ("float8_e4m3", 1, TypeError, "^scale_format must be a str"),
    ("bfloat16", "ue8m0", ValueError, "^scale_format applies to out_dtype='float8_e4m3' only"),
])
def test_out_format_errors(out_dtype, scale_format, exc, match):
    with pytest.raises(exc, match=match):
        validation.check_out_format(out_dtype, scale_format)


# ----------------------------------------------------------------------------- out and out_scale
def test_fp8_out_valid():
    validation.check_fp8_out(fp8_out(), scale(), (M, N), "[M, N]", N, 0)
    validation.check_fp8_out(None, None, (M, N), "[M, N]", N, 0)
    g, mm = 3, 65
    validation.check_fp8_out(fp8_out((g, mm, N)), scale((g, mm, 2)), (g, mm, N), "[G, max_m, N]", N, 0)
    # M = 1: the scale's M-stride is never stepped along
    validation.check_fp8_out(fp8_out((1, N)), info((1, 2), np.float32, (1, 4)), (1, N), "[M, N]", N, 0)


@pytest.mark.parametrize("n", [8, 24, 136, 1000 + 4])
def test_fp8_out_needs_n_multiple_of_16(n):
    with pytest.raises(ValueError, match="^out_dtype='float8_e4m3' needs N to be a multiple of 16.*N=%d" % n):
        validation.check_fp8_out(None, None, (M, n), "[M, N]", n, 0)


@pytest.mark.parametrize("out,exc,match", [
    (info((M, N), np.dtype("uint16")), TypeError, "^out must have dtype uint8"),
    (info((M, N), np.int8), TypeError, "^out must have dtype uint8"),
    (info((M, N + 16), np.uint8), ValueError, r"^out must have shape \[M, N\]"),
    (info((N,), np.uint8), ValueError, "^out must be 2-D"),
    (info((M, N), np.uint8, (N + 8, 1)), ValueError, "^out row stride must be .* a multiple of 16 bytes"),
    (info((M, N), np.uint8, ptr=0x7F00_0000_0008), ValueError, "^out base address must be 16-byte aligned"),
    ("not an array", TypeError, "^out must be a CUDA device array"),
])
def test_fp8_out_rejects(out, exc, match):
    with pytest.raises(exc, match=match):
        validation.check_fp8_out(out, None, (M, N), "[M, N]", N, 0)


def test_fp8_masked_out_must_be_c_contiguous():
    g, mm = 2, 64
    strided = info((g, mm, N), np.uint8, (mm * (N + 16), N + 16, 1))
    with pytest.raises(ValueError, match="^out (groups must follow|must be C-contiguous)"):
        validation.check_fp8_out(strided, None, (g, mm, N), "[G, max_m, N]", N, 0)


@pytest.mark.parametrize("out_scale,exc,match", [
    (info((M, 2), np.float32), ValueError, r"^out_scale must be M-major .*strides \(1, 100\)"),
    (info((M, 2), np.float64, aligned_strides((M, 2))), TypeError, "^out_scale must have dtype float32"),
    (scale((M, 3)), ValueError, r"^out_scale must have shape \[M, ceil\(N/128\)\] = \(100, 2\)"),
    (scale((M + 1, 2)), ValueError, "^out_scale must have shape"),
    (info((M, 2), np.float32, aligned_strides((M, 2)), ptr=0x7F00_0000_0004), ValueError, "^out_scale must be M-major"),
])
def test_fp8_out_scale_rejects(out_scale, exc, match):
    with pytest.raises(exc, match=match):
        validation.check_fp8_out(None, out_scale, (M, N), "[M, N]", N, 0)


def test_fp8_out_devices():
    with pytest.raises(ValueError, match="^out_scale is on device 1"):
        validation.check_fp8_out(None, info((M, 2), np.float32, aligned_strides((M, 2)), device=1), (M, N), "[M, N]",
                                 N, 0)


# ----------------------------------------------------------------------------- the heuristic
@pytest.mark.parametrize("layout,m,n,k,g", [
    ("normal", 1, 256, 7168, 1), ("normal", 64, 2112, 7168, 1), ("normal", 128, 7168, 2048, 1),
    ("normal", 4096, 24576, 1536, 1), ("normal", 7, 16, 112, 1), ("contiguous", 8 * 4096, 4096, 7168, 8),
    ("contiguous", 4 * 64, 7168, 2048, 4), ("masked", 32, 4096, 7168, 32), ("masked", 1024, 7168, 2048, 2)])
@pytest.mark.parametrize("fmt", ["float8_e4m3", "float8_e4m3_ue8m0"])
def test_fp8_out_tiles(layout, m, n, k, g, fmt):
    cfg = heuristics.choose(layout, m, n, k, g, 132, fmt).config
    assert cfg.out_format == fmt and cfg.out_fp8
    if cfg.group_ctas == 1:
        assert cfg.block_n % 128 == 0 and cfg.swizzle_d == 128
    else:  # narrower tiles whose CTAs share the scale group
        assert heuristics.can_share_group(cfg.block_n, cfg.group_ctas) and cfg.swizzle_d == cfg.block_n
        assert layout == "normal" and cfg.splits == 1 and cfg.cluster_dims == cfg.group_ctas
    assert cfg.splits == 1 or (cfg.block_n == 128 and heuristics.can_split_k(cfg.block_n, k, cfg.splits))
    # split K (decode) and the masked split tail as bf16 has them, over the tiles e4m3 can use
    if layout == "masked":
        assert cfg.tail_split == heuristics.tail_split_for("masked", cfg.block_n, k)
    assert cfg.smem_bytes <= heuristics.SMEM_CAPACITY
    # bf16 picks are untouched by the option
    assert heuristics.choose(layout, m, n, k, g, 132).config.out_format == "bfloat16"


@pytest.mark.parametrize("m,n,k", [(1, 7168, 2048), (64, 7168, 2048), (64, 7168, 16384), (128, 7168, 2048),
                                   (64, 4096, 7168), (128, 4096, 7168), (64, 2112, 7168), (128, 2112, 7168)])
@pytest.mark.parametrize("sms", [132, 114, 78])
def test_fp8_out_shares_groups_where_bf16_picks_narrow_unsplit_tiles(m, n, k, sms):
    """At decode-sized M, e4m3 takes bf16's pick where it is 64 or 32 wide and unsplit, its 2 or 4 CTAs a
    group in clusters, if those fit on the SMs at once; otherwise 128-wide tiles."""
    bf16 = heuristics.choose("normal", m, n, k, 1, sms)
    plan = heuristics.choose("normal", m, n, k, 1, sms, "float8_e4m3")
    group_ctas = 128 // bf16.config.block_n
    shared_ctas = heuristics.ceil_div(m, bf16.config.block_m) * heuristics.ceil_div(
        bf16.config.num_n_blocks, max(group_ctas, 1)) * group_ctas
    wanted = (bf16.config.split_k == 1 and heuristics.can_share_group(bf16.config.block_n, group_ctas)
              and shared_ctas <= heuristics.cluster_capacity(group_ctas, sms))
    if wanted:
        cfg = plan.config
        assert (cfg.block_m, cfg.block_n, cfg.group_ctas, cfg.split_k) == (bf16.config.block_m, bf16.config.block_n,
                                                                         group_ctas, 1)
        assert plan.num_tiles == shared_ctas and plan.grid % group_ctas == 0 and plan.grid <= sms
    else:
        assert plan.config.group_ctas == 1 and plan.config.block_n % 128 == 0


def test_fp8_out_shared_group_picks_on_the_h200():
    """The shapes the rule was made for (NOTES.md v24): bf16's 64-wide unsplit tiles, CTA pairs."""
    for m, n, k in ((64, 7168, 2048), (64, 7168, 16384), (128, 7168, 2048)):
        cfg = heuristics.choose("normal", m, n, k, 1, 132, "float8_e4m3").config
        assert (cfg.block_n, cfg.group_ctas, cfg.cluster_dims) == (64, 2, 2)


@pytest.mark.parametrize("kwargs,match", [
    (dict(block_n=64, group_ctas=2, out_format="bfloat16"), "needs e4m3 output"),
    (dict(block_n=64, group_ctas=4), "block_n \\* group_ctas == 128"),
    (dict(block_n=16, group_ctas=8), "group_ctas 2 or 4"),
    (dict(block_n=64, group_ctas=2, split_k=2), "no split"),
    (dict(block_n=64, group_ctas=2, layout="masked"), "the normal layout"),
])
def test_make_config_refuses_bad_group_sharing(kwargs, match):
    args = dict(layout="normal", n=1024, k=1024, num_groups=1, block_m=64, out_format="float8_e4m3")
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        heuristics.make_config(**args)


def test_choose_rejects_unknown_out_format():
    with pytest.raises(ValueError, match="^out_format must be one of"):
        heuristics.choose("normal", 64, 256, 512, 1, 132, "float8")


# ----------------------------------------------------------------------------- the scale rule (NumPy)
def test_ue8m0_scale_rounds_up_to_a_power_of_two():
    amax = np.float32([AMAX_FLOOR, 1.0, 448.0, 449.0, 896.0, 3.0e38])
    s, inv = quantize_scale(amax, "ue8m0")
    exact = amax.astype(np.float64) / FP8_MAX
    assert np.all(s.view(np.uint32) & 0x7FFFFF == 0)
    assert np.all(s >= np.float32(exact)) and np.all(s < 2 * exact + 1e-30)
    assert np.array_equal(s * inv, np.ones_like(s))
    assert s[2] == 1.0 and s[3] == 2.0 and s[4] == 2.0
    assert np.array_equal(pow2_ceil(np.float32([1.0, 1.5, 0.75])), np.float32([1.0, 2.0, 1.0]))


def test_reference_quantizer_scale_formats():
    x = np.random.default_rng(1).standard_normal((8, 300)).astype(np.float32)
    q32, s32 = per_token_cast_to_fp8_numpy(x)
    q8, s8 = per_token_cast_to_fp8_numpy(x, "ue8m0")
    assert s8.shape == s32.shape == (8, 3)
    assert np.all(s8 >= s32) and np.all(s8 < 2 * s32)
    with pytest.raises(ValueError, match="^scale_format must be one of"):
        per_token_cast_to_fp8_numpy(x, "fp32")


@pytest.mark.parametrize("layout,m,n,k,g,split,want", [
    ("normal", 4096, 32768, 512, 1, 1, True),      # 256x128 tiles
    ("normal", 130, 320, 1024, 1, 1, True),        # N a multiple of 64, not of 128: the last tile half past N
    ("normal", 200, 992, 1040, 1, 1, False),       # N not a multiple of 64
    ("normal", 128, 2112, 7168, 1, 3, False),      # split tiles: a CTA's column chunk (NOTES.md v50)
    ("normal", 128, 4096, 7168, 1, 2, False),
    ("masked", 64, 640, 1024, 6, 1, False),        # (its last wave split over pairs)
    ("masked", 64, 640, 512, 6, 1, True),         # (too few k-blocks to split its last wave)
    ("contiguous", 640, 384, 768, 5, 1, True)])
def test_fp8_out_b_in_fragment_order(layout, m, n, k, g, split, want):
    """e4m3 tiles of whole 64-column blocks load B's rows in the accumulator's fragment order, so that the bytes go
    out 16 at a time (heuristics.permutes_b, which the kernel's kPermuteB must match: a static_assert in every
    rendered e4m3 kernel); bf16 and split tiles never do."""
    cfg = heuristics.choose(layout, m, n, k, g, 132, "float8_e4m3").config
    if split > 1:
        cfg = heuristics.make_config(layout, n, k, g, 64, 128, split_k=split, stream_b=True, out_format="float8_e4m3")
    assert heuristics.permutes_b(cfg) == want
    assert not heuristics.permutes_b(heuristics.choose(layout, m, n, k, g, 132).config)
