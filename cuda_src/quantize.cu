// FP8 (e4m3) quantizers, DeepSeek-V3 recipe: amax of each tile (clamped to >= 1e-4),
// q = saturate_e4m3(x * (448 / amax)), scale = amax / 448; with ue8m0 the scale is rounded up to a power
// of two and q = saturate_e4m3(x * (1 / scale)) (exact). Loaded by cugemm8/quantize.py through
// cupy.RawKernel, its include written in. Results are bitwise equal to the NumPy references, so every
// float operation is written out with its rounding (no contraction, no fast division).
//
// in_kind: 0 float32, 1 float16, 2 bfloat16 (16-bit inputs are read as raw bits).
#include "ptx/convert.cuh"

__device__ __forceinline__ float load_as_float(const void* x, int in_kind, long long i) {
    if (in_kind == 0) {
        return static_cast<const float*>(x)[i];
    }
    const unsigned short bits = static_cast<const unsigned short*>(x)[i];
    if (in_kind == 2) {
        return __uint_as_float(static_cast<unsigned int>(bits) << 16);
    }
    return cg8::f16_bits_to_f32(bits);
}

__device__ __forceinline__ unsigned char to_e4m3(float v) { return cg8::f32_to_e4m3_sat(v); }

// The tile's scale and the factor its elements are multiplied by, from its floored amax (the recipe:
// ptx/convert.cuh).
__device__ __forceinline__ void scale_of(float amax, int ue8m0, float& scale, float& inv) {
    if (ue8m0) {
        cg8::e4m3_scale<true>(amax, scale, inv);
    } else {
        cg8::e4m3_scale<false>(amax, scale, inv);
    }
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
    }
    return v;
}

// One warp per 1x128 tile of a row-major [rows, cols] input; each lane owns 4 consecutive elements.
// q: [rows, cols] bytes; scale: [rows, kblocks] row-major. blockDim.x must be a multiple of 32.
extern "C" __global__ void per_token_cast_to_fp8(const void* __restrict__ x, int in_kind,
                                                 unsigned char* __restrict__ q, float* __restrict__ scale,
                                                 long long rows, int cols, int kblocks, int ue8m0) {
    const int lane = threadIdx.x & 31;
    const long long num_tiles = rows * kblocks;
    const long long num_warps = (static_cast<long long>(gridDim.x) * blockDim.x) >> 5;
    long long tile = (static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x) >> 5;
    for (; tile < num_tiles; tile += num_warps) {  // warp-uniform loop
        const long long row = tile / kblocks;
        const int col0 = static_cast<int>(tile - row * kblocks) * 128 + lane * 4;
        const long long base = row * cols;
        float v[4];
        float amax = 0.0f;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            v[j] = col0 + j < cols ? load_as_float(x, in_kind, base + col0 + j) : 0.0f;
            amax = fmaxf(amax, fabsf(v[j]));
        }
        amax = fmaxf(warp_max(amax), 1e-4f);
        float s, inv;
        scale_of(amax, ue8m0, s, inv);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (col0 + j < cols) {
                q[base + col0 + j] = to_e4m3(__fmul_rn(v[j], inv));
            }
        }
        if (lane == 0) {
            scale[tile] = s;
        }
    }
}

// The same for cols % 8 == 0 (rows then start on 16-byte boundaries of a 16-bit input, 32 of a float32 one)
// and fewer than 2^31 tiles: 16 lanes per 1x128 tile, each loading 8 consecutive elements at once and storing
// their 8 bytes, three tiles per half-warp in flight. Same results as per_token_cast_to_fp8.
// 8 consecutive elements as raw 16-byte words (one for 16-bit inputs, two for float32), and as floats.
template <int kInKind>
struct Raw8 {
    uint4 w[kInKind == 0 ? 2 : 1];
};

template <int kInKind>
__device__ __forceinline__ Raw8<kInKind> load_raw8(const void* x, long long i) {
    Raw8<kInKind> r;
    if constexpr (kInKind == 0) {
        r.w[0] = *reinterpret_cast<const uint4*>(static_cast<const float*>(x) + i);
        r.w[1] = *reinterpret_cast<const uint4*>(static_cast<const float*>(x) + i + 4);
    } else {
        r.w[0] = *reinterpret_cast<const uint4*>(static_cast<const unsigned short*>(x) + i);
    }
    return r;
}

template <int kInKind>
__device__ __forceinline__ void unpack8(const Raw8<kInKind>& r, float (&v)[8]) {
    if constexpr (kInKind == 0) {
        const uint4 lo = r.w[0], hi = r.w[1];
        v[0] = __uint_as_float(lo.x), v[1] = __uint_as_float(lo.y), v[2] = __uint_as_float(lo.z);
        v[3] = __uint_as_float(lo.w), v[4] = __uint_as_float(hi.x), v[5] = __uint_as_float(hi.y);
        v[6] = __uint_as_float(hi.z), v[7] = __uint_as_float(hi.w);
    } else {
        const unsigned int w[4] = {r.w[0].x, r.w[0].y, r.w[0].z, r.w[0].w};
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            const unsigned short b0 = w[j] & 0xFFFFu, b1 = w[j] >> 16;
            if constexpr (kInKind == 2) {
                v[2 * j] = __uint_as_float(static_cast<unsigned int>(b0) << 16);
                v[2 * j + 1] = __uint_as_float(static_cast<unsigned int>(b1) << 16);
            } else {
                v[2 * j] = cg8::f16_bits_to_f32(b0);
                v[2 * j + 1] = cg8::f16_bits_to_f32(b1);
            }
        }
    }
}

template <int kInKind>
__device__ __forceinline__ void load8(const void* x, long long i, float (&v)[8]) {
    unpack8<kInKind>(load_raw8<kInKind>(x, i), v);
}

template <int kInKind>
__device__ __forceinline__ void per_token_vec(const void* __restrict__ x, unsigned char* __restrict__ q,
                                              float* __restrict__ scale, unsigned int rows, int cols, int kblocks,
                                              int ue8m0) {
    constexpr int kTiles = 3;  // tiles in flight per half-warp
    const int sub = threadIdx.x & 15;  // lane within the half-warp
    // 32-bit tile indices (the host sends more than 2^31 tiles to the scalar kernel): a 64-bit division per
    // tile held the kernel to ~60% of the copy bandwidth.
    const unsigned int num_tiles = rows * static_cast<unsigned int>(kblocks);
    const unsigned int thread = blockIdx.x * blockDim.x + threadIdx.x;
    const unsigned int step = (gridDim.x * blockDim.x) >> 4;  // half-warps in the grid
    // Each warp takes tiles w0, w0 + 1 (its halves) and those plus `step`, 2 * step, ...; the loop is
    // warp-uniform (the shuffles span the warp).
    for (unsigned int w0 = (thread >> 5) * 2; w0 < num_tiles; w0 += kTiles * step) {
        float v[kTiles][8], amax[kTiles];
        long long at[kTiles];
        bool live[kTiles];  // this thread's 8 elements exist (cols % 8 == 0: all of them or none)
        unsigned int tile[kTiles];
#pragma unroll
        for (int u = 0; u < kTiles; ++u) {
            tile[u] = w0 + ((thread >> 4) & 1u) + u * step;
            const bool exists = tile[u] < num_tiles;
            const unsigned int row = exists ? tile[u] / kblocks : 0u;
            const int col = static_cast<int>((exists ? tile[u] : 0u) - row * kblocks) * 128 + sub * 8;
            at[u] = static_cast<long long>(row) * cols + col;
            live[u] = exists && col < cols;
            amax[u] = 0.0f;
            if (live[u]) {
                load8<kInKind>(x, at[u], v[u]);
            } else {
#pragma unroll
                for (int j = 0; j < 8; ++j) v[u][j] = 0.0f;
            }
#pragma unroll
            for (int j = 0; j < 8; ++j) amax[u] = fmaxf(amax[u], fabsf(v[u][j]));
        }
#pragma unroll
        for (int u = 0; u < kTiles; ++u) {
#pragma unroll
            for (int offset = 8; offset > 0; offset >>= 1)
                amax[u] = fmaxf(amax[u], __shfl_xor_sync(0xffffffffu, amax[u], offset));
            float s, inv;
            scale_of(fmaxf(amax[u], 1e-4f), ue8m0, s, inv);
            if (live[u]) {
                unsigned int packed[2];
#pragma unroll
                for (int j = 0; j < 2; ++j) {
                    const unsigned int lo = cg8::f32x2_to_e4m3x2_sat(__fmul_rn(v[u][4 * j], inv),
                                                                     __fmul_rn(v[u][4 * j + 1], inv));
                    const unsigned int hi = cg8::f32x2_to_e4m3x2_sat(__fmul_rn(v[u][4 * j + 2], inv),
                                                                     __fmul_rn(v[u][4 * j + 3], inv));
                    packed[j] = lo | (hi << 16);
                }
                *reinterpret_cast<uint2*>(q + at[u]) = make_uint2(packed[0], packed[1]);
            }
            if (tile[u] < num_tiles && sub == 0) scale[tile[u]] = s;
        }
    }
}

// 256 threads, at most 64 registers: 4 CTAs (32 warps) resident per SM; launched as that many per SM.
extern "C" __global__ void __launch_bounds__(256, 4) per_token_cast_to_fp8_vec(const void* __restrict__ x, int in_kind,
                                                     unsigned char* __restrict__ q, float* __restrict__ scale,
                                                     unsigned int rows, int cols, int kblocks, int ue8m0) {
    if (in_kind == 0) per_token_vec<0>(x, q, scale, rows, cols, kblocks, ue8m0);
    else if (in_kind == 1) per_token_vec<1>(x, q, scale, rows, cols, kblocks, ue8m0);
    else per_token_vec<2>(x, q, scale, rows, cols, kblocks, ue8m0);
}

// One CTA per 128x128 tile of a row-major [groups, rows, cols] input; grid (kblocks, nblocks, groups).
// q: same shape as the input; scale: [groups, nblocks, kblocks] row-major. blockDim.x: 32 * (1..32).
extern "C" __global__ void per_block_cast_to_fp8(const void* __restrict__ x, int in_kind,
                                                 unsigned char* __restrict__ q, float* __restrict__ scale,
                                                 int rows, int cols, int ue8m0) {
    __shared__ float partial[32];
    const int row0 = blockIdx.y * 128;
    const int col0 = blockIdx.x * 128;
    const int tile_rows = min(128, rows - row0);
    const int tile_cols = min(128, cols - col0);
    const long long base = static_cast<long long>(blockIdx.z) * rows * cols +
                           static_cast<long long>(row0) * cols + col0;

    float amax = 0.0f;
    for (int i = threadIdx.x; i < 128 * 128; i += blockDim.x) {
        const int r = i >> 7, c = i & 127;
        if (r < tile_rows && c < tile_cols) {
            amax = fmaxf(amax, fabsf(load_as_float(x, in_kind, base + static_cast<long long>(r) * cols + c)));
        }
    }
    amax = warp_max(amax);
    if ((threadIdx.x & 31) == 0) {
        partial[threadIdx.x >> 5] = amax;
    }
    __syncthreads();
    amax = 0.0f;
    for (int w = 0; w < (blockDim.x >> 5); ++w) {
        amax = fmaxf(amax, partial[w]);
    }
    float s, inv;
    scale_of(fmaxf(amax, 1e-4f), ue8m0, s, inv);

    for (int i = threadIdx.x; i < 128 * 128; i += blockDim.x) {
        const int r = i >> 7, c = i & 127;
        if (r < tile_rows && c < tile_cols) {
            const long long at = base + static_cast<long long>(r) * cols + c;
            q[at] = to_e4m3(__fmul_rn(load_as_float(x, in_kind, at), inv));
        }
    }
    if (threadIdx.x == 0) {
        const long long tile = (static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
        scale[tile] = s;
    }
}

// per_block_cast_to_fp8 for cols % 8 == 0, in one pass: each of 256 threads loads 8 consecutive elements of
// 8 rows (16-byte loads) and keeps them in registers, as loaded, through the tile's amax. The two-pass kernel above reads
// every element twice with 2- or 4-byte loads (0.21-0.24 of the copy bandwidth: NOTES.md v20).
template <int kInKind>
__device__ __forceinline__ void per_block_vec(const void* __restrict__ x, unsigned char* __restrict__ q,
                                              float* __restrict__ scale, int rows, int cols, int ue8m0) {
    __shared__ float partial[8];
    const int row0 = blockIdx.y * 128, col = blockIdx.x * 128 + (threadIdx.x & 15) * 8;
    const int r0 = threadIdx.x >> 4;  // this thread's rows: r0, r0 + 16, ..., r0 + 112 of the tile
    const long long base = static_cast<long long>(blockIdx.z) * rows * cols;
    // The raw words, not floats: half the registers for 16-bit inputs, so more CTAs fit on an SM.
    Raw8<kInKind> raw[8];
    float amax = 0.0f;
#pragma unroll
    for (int p = 0; p < 8; ++p) {
        const int row = row0 + r0 + 16 * p;
        if (row < rows && col < cols) {
            raw[p] = load_raw8<kInKind>(x, base + static_cast<long long>(row) * cols + col);
        } else {
#pragma unroll
            for (int j = 0; j < (kInKind == 0 ? 2 : 1); ++j) raw[p].w[j] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
#pragma unroll
    for (int p = 0; p < 8; ++p) {
        float v[8];
        unpack8<kInKind>(raw[p], v);
#pragma unroll
        for (int j = 0; j < 8; ++j) amax = fmaxf(amax, fabsf(v[j]));
    }
    amax = warp_max(amax);
    if ((threadIdx.x & 31) == 0) partial[threadIdx.x >> 5] = amax;
    __syncthreads();
    amax = 0.0f;
#pragma unroll
    for (int w = 0; w < 8; ++w) amax = fmaxf(amax, partial[w]);
    float s, inv;
    scale_of(fmaxf(amax, 1e-4f), ue8m0, s, inv);
#pragma unroll
    for (int p = 0; p < 8; ++p) {
        const int row = row0 + r0 + 16 * p;
        if (row < rows && col < cols) {
            float v[8];
            unpack8<kInKind>(raw[p], v);
            unsigned int packed[2];
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                const unsigned int lo = cg8::f32x2_to_e4m3x2_sat(__fmul_rn(v[4 * j], inv), __fmul_rn(v[4 * j + 1], inv));
                const unsigned int hi = cg8::f32x2_to_e4m3x2_sat(__fmul_rn(v[4 * j + 2], inv),
                                                                 __fmul_rn(v[4 * j + 3], inv));
                packed[j] = lo | (hi << 16);
            }
            *reinterpret_cast<uint2*>(q + base + static_cast<long long>(row) * cols + col) =
                make_uint2(packed[0], packed[1]);
        }
    }
    if (threadIdx.x == 0) {
        const long long tile = (static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
        scale[tile] = s;
    }
}

// Grid (kblocks, nblocks, groups), 256 threads; one kernel per input kind (0 float32, 1 float16, 2 bfloat16),
// so that each is allocated the registers it needs (64 to 86; a cap of 64 spilled).
#define CG8_PER_BLOCK_VEC(kind)                                                                                    \
    extern "C" __global__ void __launch_bounds__(256) per_block_cast_to_fp8_vec##kind(                            \
        const void* __restrict__ x, int, unsigned char* __restrict__ q, float* __restrict__ scale, int rows,       \
        int cols, int ue8m0) {                                                                                     \
        per_block_vec<kind>(x, q, scale, rows, cols, ue8m0);                                                       \
    }
CG8_PER_BLOCK_VEC(0)
CG8_PER_BLOCK_VEC(1)
CG8_PER_BLOCK_VEC(2)
