// FP8 (e4m3) quantizers, DeepSeek-V3 recipe: amax of each tile (clamped to >= 1e-4),
// q = saturate_e4m3(x * (448 / amax)), scale = amax / 448; with ue8m0 the scale is rounded up to a power
// of two and q = saturate_e4m3(x * (1 / scale)) (exact). Loaded by cugemm8/quantize.py through
// cupy.RawKernel, its include written in. Results are bitwise equal to the NumPy references, so every
// float operation is written out with its rounding (no contraction, no fast division).
//
// in_kind: 0 float32, 1 float16, 2 bfloat16 (16-bit inputs are read as raw bits).
// One file past 400 lines: CuPy compiles one self-contained source per file (cugemm8/quantize.py), and the
// per-token, per-block and transposed kernels share its loads (Raw8), the recipe (scale_of) and the e4m3 packing.
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

// per_token_cast_to_fp8 for cols % 8 == 0 (rows start on 16-byte boundaries of a 16-bit input, 32 of a float32
// one) and fewer than 2^31 tiles. A quad of lanes takes a 1x128 tile, a warp 8 consecutive tiles: load j of lane p
// of the quad reads 8 elements, chunk p + 4j of the tile, so that each load instruction of the warp reads 8 runs of
// 64 bytes (whole 32-byte sectors) and each store writes 8 runs of 32. A tile's amax then takes two shuffles and
// its scale one division per lane, where a tile per half-warp took four shuffles and a division per 16 bytes
// loaded (NOTES.md v29). kBatches tiles per quad are loaded before any is used. Same results as
// per_token_cast_to_fp8.
#ifndef CG8_TOKEN_BATCHES  // probes may set it
#define CG8_TOKEN_BATCHES 1
#endif

template <int kInKind>
__device__ __forceinline__ void per_token_vec(const void* __restrict__ x, unsigned char* __restrict__ q,
                                              float* __restrict__ scale, unsigned int rows, int cols, int kblocks,
                                              int ue8m0) {
    constexpr int kLoads = 4, kBatches = CG8_TOKEN_BATCHES;  // 16 chunks of 8 a tile, 4 a lane
    const unsigned int part = threadIdx.x & 3;
    // 32-bit tile indices (the host sends more than 2^31 tiles to the scalar kernel): 64-bit division per tile
    // held an earlier kernel to ~60% of the copy bandwidth.
    const unsigned int num_tiles = rows * static_cast<unsigned int>(kblocks);
    const unsigned int quad = (blockIdx.x * blockDim.x + threadIdx.x) >> 2;
    const unsigned int quads = (gridDim.x * blockDim.x) >> 2;
    // Quad i takes tiles i, i + quads, i + 2 quads, ...; the loop is warp-uniform (the shuffles span the warp).
    for (unsigned int t0 = quad & ~7u; t0 < num_tiles; t0 += kBatches * quads) {
        Raw8<kInKind> raw[kBatches][kLoads];
        long long at[kBatches];   // the tile's first element
        int ncols[kBatches];      // its valid columns past this lane's first chunk (<= 0: none)
#pragma unroll
        for (int b = 0; b < kBatches; ++b) {
            const unsigned int tile = t0 + (quad & 7u) + b * quads;
            const bool exists = tile < num_tiles;
            const unsigned int row = exists ? tile / kblocks : 0u;
            const int col = static_cast<int>((exists ? tile : 0u) - row * kblocks) * 128;
            at[b] = static_cast<long long>(row) * cols + col;
            ncols[b] = exists ? cols - col - static_cast<int>(part) * 8 : 0;
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
                if (32 * j < ncols[b]) {
                    raw[b][j] = load_raw8<kInKind>(x, at[b] + (part + 4 * j) * 8);
                } else {
#pragma unroll
                    for (int w = 0; w < (kInKind == 0 ? 2 : 1); ++w) raw[b][j].w[w] = make_uint4(0u, 0u, 0u, 0u);
                }
            }
        }
#pragma unroll
        for (int b = 0; b < kBatches; ++b) {
            float a0 = 0.0f, a1 = 0.0f;  // two chains, for latency
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
                float v[8];
                unpack8<kInKind>(raw[b][j], v);
#pragma unroll
                for (int e = 0; e < 8; e += 2) a0 = fmaxf(a0, fabsf(v[e])), a1 = fmaxf(a1, fabsf(v[e + 1]));
            }
            float amax = fmaxf(a0, a1);
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 1));
            amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, 2));
            float s, inv;
            scale_of(fmaxf(amax, 1e-4f), ue8m0, s, inv);
#pragma unroll
            for (int j = 0; j < kLoads; ++j) {
                if (32 * j < ncols[b]) {
                    float v[8];
                    unpack8<kInKind>(raw[b][j], v);
                    unsigned int packed[2];
#pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const unsigned int lo = cg8::f32x2_to_e4m3x2_sat(__fmul_rn(v[4 * h], inv),
                                                                         __fmul_rn(v[4 * h + 1], inv));
                        const unsigned int hi = cg8::f32x2_to_e4m3x2_sat(__fmul_rn(v[4 * h + 2], inv),
                                                                         __fmul_rn(v[4 * h + 3], inv));
                        packed[h] = lo | (hi << 16);
                    }
                    *reinterpret_cast<uint2*>(q + at[b] + (part + 4 * j) * 8) = make_uint2(packed[0], packed[1]);
                }
            }
            const unsigned int tile = t0 + (quad & 7u) + b * quads;
            if (tile < num_tiles && part == 0) scale[tile] = s;
        }
    }
}

// 256 threads, at most 64 registers: CG8_TOKEN_CTAS (4: 32 warps) resident per SM, launched as that many per SM
// (cugemm8/quantize.py). One kernel per input kind (0 float32, 1 float16, 2 bfloat16), each allocated its own
// registers.
#ifndef CG8_TOKEN_CTAS  // probes may set it
#define CG8_TOKEN_CTAS 4
#endif
#define CG8_PER_TOKEN_VEC(kind)                                                                                    \
    extern "C" __global__ void __launch_bounds__(256, CG8_TOKEN_CTAS) per_token_cast_to_fp8_vec##kind(                         \
        const void* __restrict__ x, int, unsigned char* __restrict__ q, float* __restrict__ scale,                 \
        unsigned int rows, int cols, int kblocks, int ue8m0) {                                                     \
        per_token_vec<kind>(x, q, scale, rows, cols, kblocks, ue8m0);                                              \
    }
CG8_PER_TOKEN_VEC(0)
CG8_PER_TOKEN_VEC(1)
CG8_PER_TOKEN_VEC(2)

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

// per_token_cast_to_fp8 of a transposed matrix, in one pass: the input is the row-major x[G][T][C], the result
// that of its transpose xᵀ[G][C][T] quantized along T (a weight gradient's operands are quantized along the
// tokens, which activations keep as rows). q[G][C][T], scale[G][C][ceil(T/128)].
// A CTA takes 128 rows of x (one 1x128 tile of each output row) by kCols columns, 256 bytes of each row:
// - each thread loads 8 elements of 8 rows (16-bit input) or 4 (float32), all loads first, and stores them as they
//   are into shared memory (row-major: a warp's stores fill whole rows);
// - warp w then takes rows 16w .. 16w + 15 of the tile and lane l its 8 bytes of each (4 or 2 columns): loads of
//   whole rows, no bank conflict; the columns' amax over the 8 warps through shared memory;
// - each thread converts its 16 values of each column to 16 bytes of output row c, into an output tile (rows of
//   128 bytes, 16-byte chunks placed by chunk ^ (l % 8): no bank conflict), which leaves by whole 128-byte rows.
// Rows beyond T and columns beyond C are left out. For C % 8 == 0 and T % 16 == 0 (whole 16-byte loads and
// stores). Grid (ceil(T/128), ceil(C/kCols), G), 256 threads: CTAs launched together write adjacent runs of the
// same output rows. Same results as per_token_cast_to_fp8 of the transpose. (A thread per column with 16-byte
// stores of its own: 0.59 of a same-size copy, L2-bound on a store request per 16 bytes, NOTES.md v29.)
template <int kInKind> struct TileElem { using type = unsigned short; };  // 16-bit inputs: their raw bits
template <> struct TileElem<0> { using type = float; };

// Element j (of 8 / sizeof(Elem)) of an 8-byte word as a float. The bfloat16 one's conversion is opaque, so that
// ptxas does not keep all of a thread's values as floats between their two uses: that took 114 registers, two
// CTAs an SM.
template <int kInKind>
__device__ __forceinline__ float word_elem(uint2 w, int j) {
    const unsigned int half = j < (kInKind == 0 ? 1 : 2) ? w.x : w.y;
    if constexpr (kInKind == 0) {
        return __uint_as_float(half);
    } else if constexpr (kInKind == 2) {
        return cg8::bf16_half_to_f32_opaque(half, j % 2 == 1);
    } else {
        return cg8::f16_bits_to_f32(static_cast<unsigned short>(j % 2 == 0 ? half & 0xFFFFu : half >> 16));
    }
}

template <int kInKind>
__device__ __forceinline__ void per_token_t_vec(const void* __restrict__ x, unsigned char* __restrict__ q,
                                                float* __restrict__ scale, int rows, int cols, int ue8m0) {
    using Elem = typename TileElem<kInKind>::type;
    constexpr int kCols = 256 / sizeof(Elem);                          // a tile row: 256 bytes of x
    constexpr int kRowThreads = kCols / 8, kStep = 256 / kRowThreads;  // 8 elements a load (16 or 32 bytes)
    constexpr int kLoads = 128 / kStep;                                // 8 rows of 16-bit input, 4 of float32
    constexpr int kVec = 8 / sizeof(Elem);                             // columns a thread takes: 8 bytes a row
    __shared__ __align__(16) unsigned char smem[128 * 256];            // the input tile, then the output tile
    __shared__ float part_amax[8][kCols];
    auto& tile = *reinterpret_cast<Elem(*)[128][kCols]>(smem);
    const int t0 = blockIdx.x * 128, c0 = blockIdx.y * kCols;
    const long long plane = static_cast<long long>(blockIdx.z) * rows * cols;
    const int lr = threadIdx.x / kRowThreads, lc = threadIdx.x % kRowThreads * 8;  // load: first row, column
    Raw8<kInKind> raw[kLoads];
#pragma unroll
    for (int s = 0; s < kLoads; ++s) {
        const int t = t0 + lr + kStep * s;
        if (t < rows && c0 + lc < cols) {
            raw[s] = load_raw8<kInKind>(x, plane + static_cast<long long>(t) * cols + c0 + lc);
        } else {
#pragma unroll
            for (int w = 0; w < (kInKind == 0 ? 2 : 1); ++w) raw[s].w[w] = make_uint4(0u, 0u, 0u, 0u);
        }
    }
#pragma unroll
    for (int s = 0; s < kLoads; ++s)
#pragma unroll
        for (int w = 0; w < (kInKind == 0 ? 2 : 1); ++w)
            *reinterpret_cast<uint4*>(&tile[lr + kStep * s][lc + 4 * w]) = raw[s].w[w];
    __syncthreads();
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    uint2 mine[16];  // rows 16 warp + i, columns kVec lane .. kVec lane + kVec - 1, as loaded (fewer registers)
    auto value = [&](int i, int j) { return word_elem<kInKind>(mine[i], j); };
    float amax[kVec];
#pragma unroll
    for (int j = 0; j < kVec; ++j) amax[j] = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) {
        mine[i] = *reinterpret_cast<const uint2*>(&tile[16 * warp + i][kVec * lane]);
#pragma unroll
        for (int j = 0; j < kVec; ++j) amax[j] = fmaxf(amax[j], fabsf(value(i, j)));
    }
#pragma unroll
    for (int j = 0; j < kVec; ++j) part_amax[warp][kVec * lane + j] = amax[j];
    __syncthreads();  // every amax written, every read of the input tile done
    const int kblocks = (rows + 127) / 128;
#pragma unroll
    for (int j = 0; j < kVec; ++j) {
        const int c = kVec * lane + j;
        float a = part_amax[0][c];
#pragma unroll
        for (int p = 1; p < 8; ++p) a = fmaxf(a, part_amax[p][c]);
        float s, inv;
        scale_of(fmaxf(a, 1e-4f), ue8m0, s, inv);
        if (warp == 0 && c0 + c < cols)
            scale[(static_cast<long long>(blockIdx.z) * cols + c0 + c) * kblocks + blockIdx.x] = s;
        unsigned int w[4];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            const unsigned int lo = cg8::f32x2_to_e4m3x2_sat(__fmul_rn(value(4 * k, j), inv),
                                                             __fmul_rn(value(4 * k + 1, j), inv));
            const unsigned int hi = cg8::f32x2_to_e4m3x2_sat(__fmul_rn(value(4 * k + 2, j), inv),
                                                             __fmul_rn(value(4 * k + 3, j), inv));
            w[k] = lo | (hi << 16);
        }
        *reinterpret_cast<uint4*>(smem + c * 128 + 16 * (warp ^ (lane % 8))) = make_uint4(w[0], w[1], w[2], w[3]);
    }
    __syncthreads();
#pragma unroll
    for (int pass = 0; pass < kCols / 32; ++pass) {  // 8 threads a row of 128 bytes, 32 rows a pass
        const int r = 32 * pass + threadIdx.x / 8, k = threadIdx.x % 8;
        if (c0 + r < cols && t0 + 16 * k < rows) {
            const uint4 w = *reinterpret_cast<const uint4*>(smem + r * 128 + 16 * (k ^ (r / kVec % 8)));
            *reinterpret_cast<uint4*>(q + plane + static_cast<long long>(c0 + r) * rows + t0 + 16 * k) = w;
        }
    }
}

#define CG8_PER_TOKEN_T_VEC(kind)                                                                                  \
    extern "C" __global__ void __launch_bounds__(256, 4) per_token_cast_to_fp8_t_vec##kind(                       \
        const void* __restrict__ x, unsigned char* __restrict__ q, float* __restrict__ scale, int rows, int cols,  \
        int ue8m0) {                                                                                               \
        per_token_t_vec<kind>(x, q, scale, rows, cols, ue8m0);                                                     \
    }
CG8_PER_TOKEN_T_VEC(0)
CG8_PER_TOKEN_T_VEC(1)
CG8_PER_TOKEN_T_VEC(2)
