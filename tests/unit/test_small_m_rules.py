"""CPU tier: the small-M kernel's rules (cugemm8.heuristics_small_m) and its SASS: every configuration the
heuristic can pick and every one the probes try compiles with tensor-core MMAs and no local memory."""
import pytest
from hypothesis import given
from hypothesis import strategies as st

from cugemm8 import heuristics_small_m as hs
from cugemm8 import jit, sass, small_m


def test_runs_only_on_narrow_weights_with_few_rows():
    assert hs.choose_small_m(1, 256, 7168, 132) is not None
    assert hs.choose_small_m(8, 512, 4096, 132) is not None
    assert hs.choose_small_m(9, 256, 7168, 132) is not None     # two token tiles, up to 256 rows of B
    assert hs.choose_small_m(16, 256, 4096, 132) is not None
    assert hs.choose_small_m(9, 264, 7168, 132) is None         # two token tiles on wider B: the WGMMA kernel
    assert hs.choose_small_m(16, 512, 7168, 132) is None
    assert hs.choose_small_m(17, 256, 7168, 132) is None        # three token tiles
    assert hs.choose_small_m(1, 520, 7168, 132) is None         # wider N: the WGMMA kernel streams B faster
    assert hs.choose_small_m(1, 256, 4080, 132) is None         # short K
    assert hs.choose_small_m(1, 256, 7168, 32) is None          # an SM cap below the grid (set_num_sms)


@pytest.mark.parametrize("m, n, k, rows, split", [(1, 256, 7168, 32, 8), (8, 512, 7168, 32, 4),
                                                 (3, 264, 4096, 32, 4), (8, 8, 4096, 32, 8), (16, 256, 7168, 32, 8),
                                                 (12, 136, 4096, 32, 8)])
def test_picks_about_64_ctas(m, n, k, rows, split):
    cfg = hs.choose_small_m(m, n, k, 132)
    assert (cfg.rows, cfg.split, cfg.warps, cfg.depth) == (rows, split, 8, 2)
    assert cfg.grid <= hs.TARGET_CTAS and cfg.token_tiles * 8 >= m


@given(m=st.integers(1, 32), n=st.integers(1, 64).map(lambda v: 8 * v), k=st.integers(256, 1024).map(lambda v: 16 * v),
       sms=st.integers(1, 200))
def test_every_pick_fits_the_kernel(m, n, k, sms):
    cfg = hs.choose_small_m(m, n, k, sms)
    if cfg is None:
        return
    assert hs.fits(cfg.token_tiles, cfg.row_tiles, cfg.warps, cfg.split, k)
    assert 8 * cfg.token_tiles >= m and cfg.grid <= sms
    assert cfg == hs.choose_small_m(m, n, k, sms)   # deterministic


def test_disabled_is_scoped():
    with hs.disabled():
        assert hs.choose_small_m(1, 256, 7168, 132) is None
    assert hs.enabled()


def _picks():
    seen = {}
    for m in range(1, 17):
        for n in (8, 136, 256, 264, 512):
            for k in (4096, 7168):
                cfg = hs.choose_small_m(m, n, k, 132)
                if cfg is not None:
                    seen.setdefault(cfg)
    return list(seen)


PROBED = hs.configs_for(1, 256, 7168) + hs.configs_for(16, 512, 4096) + hs.configs_for(32, 256, 4112)


@pytest.mark.parametrize("cfg", _picks() + PROBED, ids=str)
def test_config_compiles_with_mma_and_no_local_memory(cfg):
    cubin = jit.compile_cubin(small_m.render(cfg), name=f"{small_m.KERNEL_NAME}.cu")
    usage = sass.resource_usage(cubin)[small_m.KERNEL_NAME]
    assert usage["LOCAL"] == 0 and usage["STACK"] == 0, usage
    listing = sass.disassemble(cubin)
    assert listing.count("HMMA.16816.F32") >= 8 * cfg.row_tiles * cfg.token_tiles   # one k-block's MMAs
    assert "F2FP.F16.E4M3" not in listing            # converted by integer operations, not the slow F2FP


def test_for_call_routes_only_dense_bf16_calls_with_work():
    """The one route the API and precompile share: the small-M pick for dense bf16, None for other layouts, e4m3
    output or an empty dimension."""
    assert hs.for_call("normal", 1, 256, 7168, 132) == hs.choose_small_m(1, 256, 7168, 132) is not None
    for layout, m, n, k, fmt in [("contiguous", 1, 256, 7168, "bfloat16"), ("masked", 1, 256, 7168, "bfloat16"),
                                 ("normal", 1, 256, 7168, "float8_e4m3"), ("normal", 0, 256, 7168, "bfloat16"),
                                 ("normal", 1, 0, 7168, "bfloat16"), ("normal", 1, 256, 0, "bfloat16")]:
        assert hs.for_call(layout, m, n, k, 132, fmt) is None, (layout, m, n, k, fmt)


def test_precompile_builds_the_small_m_pick():
    from cugemm8.precompile import config_for   # the module: cugemm8.precompile is also the function

    assert config_for("normal", 1, 256, 7168, 1, 132) == hs.choose_small_m(1, 256, 7168, 132)
    assert not isinstance(config_for("normal", 64, 256, 7168, 1, 132), small_m.SmallMConfig)
