"""GPU tier: the e4m3 recipe's branch-free division (ptx/convert.cuh, div_rn_fast) gives __fdiv_rn's result for
every float32 amax the GEMM epilogue sends it ([1e-4, kFastDivMax]), both ways (448 / amax and amax / 448), with
the divisor a compile-time constant (as in the epilogue) and a run-time one; and the recipe's scale and factor
agree between the fast and the exact form, UE8M0 included."""
from pathlib import Path

import numpy as np
import pytest

from hopper import requires_hopper

pytestmark = [pytest.mark.gpu, requires_hopper]

cupy = pytest.importorskip("cupy")

CONVERT = Path(__file__).resolve().parents[2] / "cuda_src" / "ptx" / "convert.cuh"

SOURCE = r"""
__device__ __forceinline__ void count(unsigned long long* bad, int which, float got, float want) {
    if (__float_as_uint(got) != __float_as_uint(want)) atomicAdd(bad + which, 1ull);
}

extern "C" __global__ void check(unsigned int lo, unsigned int hi, float runtime_448, unsigned long long* bad) {
    const unsigned int step = gridDim.x * blockDim.x;
    for (unsigned int u = lo + blockIdx.x * blockDim.x + threadIdx.x; u <= hi && u >= lo; u += step) {
        const float a = __uint_as_float(u);
        count(bad, 0, cg8::div_rn_fast(448.0f, a), __fdiv_rn(448.0f, a));
        count(bad, 1, cg8::div_rn_fast(a, 448.0f), __fdiv_rn(a, 448.0f));
        count(bad, 2, cg8::div_rn_fast(runtime_448, a), __fdiv_rn(runtime_448, a));
        count(bad, 3, cg8::div_rn_fast(a, runtime_448), __fdiv_rn(a, runtime_448));
        float s0, i0, s1, i1;
        cg8::e4m3_scale<false, true>(a, s0, i0);
        cg8::e4m3_scale<false, false>(a, s1, i1);
        count(bad, 4, s0, s1);
        count(bad, 5, i0, i1);
        cg8::e4m3_scale<true, true>(a, s0, i0);
        cg8::e4m3_scale<true, false>(a, s1, i1);
        count(bad, 6, s0, s1);
        count(bad, 7, i0, i1);
        if (!cg8::e4m3_fast_ok(a)) atomicAdd(bad + 8, 1ull);
    }
}
"""


def test_fast_division_equals_fdiv_rn_over_the_whole_range():
    kernel = cupy.RawKernel(CONVERT.read_text() + SOURCE, "check", options=("-std=c++17",))
    lo = int(np.float32(1e-4).view(np.uint32))
    hi = int(np.float32(2.0 ** 64).view(np.uint32))
    bad = cupy.zeros(9, dtype=cupy.uint64)
    kernel((132 * 8,), (256,), (np.uint32(lo), np.uint32(hi), np.float32(448.0), bad))
    counts = bad.get().tolist()
    assert counts == [0] * 9, f"mismatches (448/a, a/448, runtime 448/a, a/448, s, inv, ue8m0 s, inv, range): {counts}"
    # Just past the range the exact form is taken (e4m3_fast_ok is false there, and for inf and NaN).
    outside = cupy.zeros(9, dtype=cupy.uint64)
    kernel((1,), (32,), (np.uint32(hi + 1), np.uint32(hi + 32), np.float32(448.0), outside))
    assert int(outside.get()[8]) == 32
