// Warp-level tensor-core MMA (mma.sync) and the e4m3 -> f16 conversion that feeds it. On sm_90 an e4m3
// mma.sync is lowered to F2FP conversions plus HMMA, and F2FP issues at a quarter of the integer rate, so the
// small-M kernel converts with integer masks and shifts itself and multiplies by f16 (NOTES.md v30).
#pragma once
#include "types.cuh"

namespace cg8 {

// D = A * B + C, m16n8k16, f16 inputs, f32 accumulators (the fragment layouts of the PTX ISA).
__device__ __forceinline__ void mma_m16n8k16_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Four e4m3 bytes (b0 lowest) as two f16x2 words, each value divided by 2^8: `lo` holds (b0, b2), `hi` (b1, b3)
// (low half first). Exact for every finite e4m3, subnormals included: the f16 keeps the sign, takes the seven
// exponent-and-mantissa bits one place lower (f16's exponent has one bit more), and its bias of 15 against
// e4m3's 7 is the 2^-8 that the caller's scale gives back.
__device__ __forceinline__ void e4m3x4_to_f16x2_scaled(uint32_t q, uint32_t& lo, uint32_t& hi) {
    hi = (q & 0x80008000u) | ((q & 0x7F007F00u) >> 1);
    const uint32_t s = q << 8;
    lo = (s & 0x80008000u) | ((s & 0x7F007F00u) >> 1);
}

// 16 bytes of global memory read once (not kept in L1).
__device__ __forceinline__ uint4 ld_global_stream_v4(const void* p) {
    uint4 v;
    asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

}  // namespace cg8
