// FP8 (e4m3) quantizers, DeepSeek-V3 recipe: amax of each tile (clamped to >= 1e-4),
// q = saturate_e4m3(x * (448 / amax)), scale = amax / 448. Loaded by cugemm8/quantize.py through
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
                                                 long long rows, int cols, int kblocks) {
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
        const float inv = __fdiv_rn(448.0f, amax);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
            if (col0 + j < cols) {
                q[base + col0 + j] = to_e4m3(__fmul_rn(v[j], inv));
            }
        }
        if (lane == 0) {
            scale[tile] = __fdiv_rn(amax, 448.0f);
        }
    }
}

// One CTA per 128x128 tile of a row-major [groups, rows, cols] input; grid (kblocks, nblocks, groups).
// q: same shape as the input; scale: [groups, nblocks, kblocks] row-major. blockDim.x: 32 * (1..32).
extern "C" __global__ void per_block_cast_to_fp8(const void* __restrict__ x, int in_kind,
                                                 unsigned char* __restrict__ q, float* __restrict__ scale,
                                                 int rows, int cols) {
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
    amax = fmaxf(amax, 1e-4f);
    const float inv = __fdiv_rn(448.0f, amax);

    for (int i = threadIdx.x; i < 128 * 128; i += blockDim.x) {
        const int r = i >> 7, c = i & 127;
        if (r < tile_rows && c < tile_cols) {
            const long long at = base + static_cast<long long>(r) * cols + c;
            q[at] = to_e4m3(__fmul_rn(load_as_float(x, in_kind, at), inv));
        }
    }
    if (threadIdx.x == 0) {
        const long long tile = (static_cast<long long>(blockIdx.z) * gridDim.y + blockIdx.y) * gridDim.x + blockIdx.x;
        scale[tile] = __fdiv_rn(amax, 448.0f);
    }
}
