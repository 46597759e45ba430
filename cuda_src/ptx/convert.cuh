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

}  // namespace cg8
