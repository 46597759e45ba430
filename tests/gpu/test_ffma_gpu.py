"""GPU tier: the FFMA-patched and unpatched kernels give bitwise identical results (skipped without a
Hopper GPU)."""
import pytest

from hopper import requires_hopper
from kernel_configs import OFF, ONE_WG, TWO_WG, VARIANTS

from cugemm8 import ffma, fp8_gemm


def _launch_all(cfg, specs, m, seed):
    """Output bytes (uint16) of `cfg` for each FFMA setting, on the same random inputs."""
    import cupy

    import cugemm8

    rng = cupy.random.default_rng(seed)
    a, sa = cugemm8.per_token_cast_to_fp8(rng.standard_normal((m, cfg.k), dtype=cupy.float32))
    b, sb = cugemm8.per_block_cast_to_fp8(rng.standard_normal((cfg.n, cfg.k), dtype=cupy.float32))
    sa = cugemm8.get_col_major_tma_aligned_tensor(sa)
    stream = cupy.cuda.get_current_stream()
    outs = {}
    for name, spec in specs.items():
        out = cupy.full((m, cfg.n), 0xFFFF, dtype=cupy.uint16)    # NaN: unwritten outputs differ from any result
        run = fp8_gemm.bind(cfg, a, sa, b, sb, out, ffma=spec)
        assert run.launcher.kernel.ffma == ffma.ffma_settings(spec)
        run()
        outs[name] = out
    stream.synchronize()
    return outs


@pytest.mark.gpu
@requires_hopper
@pytest.mark.parametrize("cfg", [ONE_WG, TWO_WG], ids=["block_m_64", "block_m_256"])
def test_patched_results_bitwise_identical(cfg):
    import cupy


    specs = {"off": OFF, "default": None, **VARIANTS}
    if cfg is ONE_WG:
        assert fp8_gemm.build(cfg, ffma=VARIANTS["on"]) != fp8_gemm.build(cfg, ffma=OFF)
    dev = cupy.cuda.runtime.getDevice()
    assert fp8_gemm.get_kernel(cfg, dev, OFF) is not fp8_gemm.get_kernel(cfg, dev, VARIANTS["on"])
    for m, seed in ((200, 1), (1000, 2)):
        outs = _launch_all(cfg, specs, m, seed)
        ref = outs.pop("off")
        assert not bool((ref == 0xFFFF).any()), "some outputs were not written"
        for name, out in outs.items():
            assert bool(cupy.array_equal(out, ref)), f"{name}: results differ from the unpatched kernel (M={m})"
