// Number format conversions the quantizers need (plain C++ has no e4m3).
#pragma once

namespace cg8 {

// Half-precision bits to float.
__device__ __forceinline__ float f16_bits_to_f32(unsigned short bits) {
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(bits));
    return f;
}

// Round to nearest even, clamp to +-448 (satfinite), return the e4m3 bits.
__device__ __forceinline__ unsigned char f32_to_e4m3_sat(float v) {
    unsigned short pair;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(0.0f), "f"(v));
    return static_cast<unsigned char>(pair & 0xFF);  // the second source lands in the low byte
}

// The bfloat16 in the low (`high` false) or high half of `word`, as a float, by an opaque (volatile) instruction:
// ptxas neither merges nor hoists it, so a caller that converts the same raw words twice keeps the words, not
// the floats, in registers between the two uses (quantize.cu's transposed quantizer).
__device__ __forceinline__ float bf16_half_to_f32_opaque(unsigned int word, bool high) {
    unsigned int f;
    if (high) asm volatile("and.b32 %0, %1, 0xFFFF0000;" : "=r"(f) : "r"(word));
    else asm volatile("shl.b32 %0, %1, 16;" : "=r"(f) : "r"(word));
    return __uint_as_float(f);
}

// Two floats to e4m3 (round to nearest even, clamp to +-448): `lo` in the low byte, `hi` in the high one.
__device__ __forceinline__ unsigned short f32x2_to_e4m3x2_sat(float lo, float hi) {
    unsigned short pair;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(pair) : "f"(hi), "f"(lo));
    return pair;
}

// The least power of two >= x, for a positive normal x: UE8M0 scales (round up).
__device__ __forceinline__ float pow2_ceil(float x) {
    const unsigned int bits = __float_as_uint(x);
    return __uint_as_float((bits & 0x7fffffu) ? (bits & 0x7f800000u) + 0x800000u : bits);
}

// 1 / x for a power of two x whose reciprocal is a normal float: exact.
__device__ __forceinline__ float pow2_reciprocal(float x) {
    return __uint_as_float((254u << 23) - (__float_as_uint(x) & 0x7f800000u));
}

// x / y rounded to nearest even, the value __fdiv_rn(x, y) gives, without its slow-path call (a branch that
// keeps ptxas from scheduling across it): the reciprocal's approximation refined once, the quotient corrected
// once, the steps ptxas inlines for __fdiv_rn where its range check passes. Exact where y and x / y are normal
// and far from overflow: the recipe below uses it for amax in [1e-4, kFastDivMax], and tests/gpu checks it
// against __fdiv_rn for every float there.
__device__ __forceinline__ float div_rn_fast(float x, float y) {
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
    r = __fmaf_rn(r, __fmaf_rn(-y, r, 1.0f), r);
    const float q = __fmul_rn(x, r);
    return __fmaf_rn(r, __fmaf_rn(-y, q, x), q);
}

constexpr float kFastDivMax = 18446744073709551616.0f;  // 2^64

// The e4m3 recipe (DeepSeek-V3's, shared by the quantizers and the GEMM epilogue): from the amax of a 1x128 or
// 128x128 group, floored at 1e-4, the scale s = amax / 448 (kUe8m0: rounded up to a power of two) and the
// factor the group's elements are multiplied by, inv = 448 / amax (kUe8m0: 1 / s, exact). kFast: the divisions
// by div_rn_fast, only for amax <= kFastDivMax (e4m3_fast_ok); the results are the same.
template <bool kUe8m0, bool kFast = false>
__device__ __forceinline__ void e4m3_scale(float amax, float& s, float& inv) {
    const float a = fmaxf(amax, 1e-4f);
    const auto div = [](float x, float y) { return kFast ? div_rn_fast(x, y) : __fdiv_rn(x, y); };
    if constexpr (kUe8m0) {
        s = pow2_ceil(div(a, 448.0f));
        inv = pow2_reciprocal(s);
    } else {
        s = div(a, 448.0f);
        inv = div(448.0f, a);
    }
}

__device__ __forceinline__ bool e4m3_fast_ok(float amax) { return amax <= kFastDivMax; }  // false for inf, NaN

}  // namespace cg8
