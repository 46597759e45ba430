// The block transpose of a 128x128 block-scaled FP8 matrix, for the data gradient (dX = dY W needs W^T as the
// B operand). The transpose is exact: bytes move and each 128x128 block keeps its scale.
//
// A CTA moves one 128x128-byte tile, a scale block, of one matrix of the batch (blockIdx.z), and its scale. Each
// of the 256 threads first loads four 4x4-byte blocks as 32-bit words (16 threads cover 64 contiguous bytes of a
// row), then transposes them in registers with byte permutes and writes them to shared memory at their transposed
// place; the tile leaves as 16-byte segments (8 threads cover an output row's 128 bytes). Rows and columns are
// multiples of 16, so every 4x4 block and every 16-byte segment is wholly inside the matrix or outside. Smaller
// tiles, 256-row tiles and a resident grid walking the tiles measured no faster (NOTES.md, v21).
typedef unsigned int u32;   // NVRTC has no <stdint.h>
typedef unsigned char u8;

constexpr int kTileRows = 128, kTileCols = 128, kThreads = 256;
constexpr int kRowSteps = kTileRows / 64, kColSteps = kTileCols / 64;   // 4x4 blocks a thread moves: rows x cols

struct Tile {
    u32 words[kTileCols][kTileRows / 4 + 1];  // output rows x 32 words; the extra word spreads rows over banks
};

__device__ __forceinline__ void move_tile(Tile& tile, const u8* __restrict__ src, u8* __restrict__ dst,
                                          int rows, int cols, int r0, int c0) {
    const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;
    u32 w[kRowSteps][kColSteps][4];
#pragma unroll
    for (int h = 0; h < kRowSteps; ++h) {   // every load first: more bytes in flight per thread
#pragma unroll
        for (int v = 0; v < kColSteps; ++v) {
            const int r = r0 + 64 * h + 4 * tr, c = c0 + 64 * v + 4 * tc;
#pragma unroll
            for (int i = 0; i < 4; ++i) w[h][v][i] = 0;
            if (r < rows && c < cols) {
                const u8* p = src + (long long)r * cols + c;
#pragma unroll
                for (int i = 0; i < 4; ++i) w[h][v][i] = __ldg(reinterpret_cast<const u32*>(p + i * (long long)cols));
            }
        }
    }
#pragma unroll
    for (int h = 0; h < kRowSteps; ++h) {
#pragma unroll
        for (int v = 0; v < kColSteps; ++v) {
            // w[i] holds input row i, byte j = column j. Output row j is (w0.j, w1.j, w2.j, w3.j).
            const u32* q = w[h][v];
            const u32 lo01 = __byte_perm(q[0], q[1], 0x5140), hi01 = __byte_perm(q[0], q[1], 0x7362);
            const u32 lo23 = __byte_perm(q[2], q[3], 0x5140), hi23 = __byte_perm(q[2], q[3], 0x7362);
            const int row = 64 * v + 4 * tc, word = 16 * h + tr;
            tile.words[row + 0][word] = __byte_perm(lo01, lo23, 0x5410);
            tile.words[row + 1][word] = __byte_perm(lo01, lo23, 0x7632);
            tile.words[row + 2][word] = __byte_perm(hi01, hi23, 0x5410);
            tile.words[row + 3][word] = __byte_perm(hi01, hi23, 0x7632);
        }
    }
    __syncthreads();
#pragma unroll
    for (int h = 0; h < kTileCols * kTileRows / 16 / kThreads; ++h) {
        const int segment = threadIdx.x + kThreads * h;
        const int orow = segment / (kTileRows / 16), part = segment % (kTileRows / 16);
        const int oc = c0 + orow, ocol = r0 + 16 * part;  // output row (an input column), column (an input row)
        if (oc < cols && ocol < rows) {
            const u32* q = tile.words[orow] + 4 * part;
            *reinterpret_cast<uint4*>(dst + (long long)oc * rows + ocol) = make_uint4(q[0], q[1], q[2], q[3]);
        }
    }
}

extern "C" __global__ void __launch_bounds__(kThreads) transpose_u8(const u8* __restrict__ in, u8* __restrict__ out,
                                                                    const float* __restrict__ in_scale,
                                                                    float* __restrict__ out_scale, int rows, int cols) {
    __shared__ Tile tile;
    const int r0 = blockIdx.y * kTileRows, c0 = blockIdx.x * kTileCols;
    if (threadIdx.x == 0) {  // the tile is the 128x128 block (r0 / 128, c0 / 128): move its scale
        const int nb = (rows + 127) / 128, kb = (cols + 127) / 128;
        const long long base = blockIdx.z * (long long)nb * kb;
        out_scale[base + (c0 / 128) * nb + r0 / 128] = in_scale[base + (r0 / 128) * kb + c0 / 128];
    }
    const long long plane = blockIdx.z * (long long)rows * cols;
    move_tile(tile, in + plane, out + plane, rows, cols, r0, c0);
}
