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

}  // namespace cg8
