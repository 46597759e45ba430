// The block transpose of a 128x128 block-scaled FP8 matrix, for the data gradient (dX = dY W needs W^T as the
// B operand). The payload's transpose is exact: a byte per element moves, nothing is rounded. The scale grid is
// transposed on the host side (cugemm8/transpose.py).
//
// A CTA moves a 64x64-byte tile of one matrix of the batch (blockIdx.z). Each of the 256 threads reads a 4x4-byte
// block as four 32-bit words (16 threads cover 64 contiguous bytes of a row), transposes it in registers with
// byte permutes, and writes it to shared memory at its transposed place. The tile then leaves as 16-byte row
// segments (4 threads cover 64 contiguous bytes of an output row). Rows and columns are multiples of 16, so every
// 4x4 block and every 16-byte segment is either wholly inside the matrix or wholly outside.
typedef unsigned int u32;   // NVRTC has no <stdint.h>
typedef unsigned char u8;

extern "C" __global__ void __launch_bounds__(256) transpose_u8(const u8* __restrict__ in,
                                                               u8* __restrict__ out, int rows, int cols,
                                                               long long in_batch, long long out_batch) {
    __shared__ u32 tile[64][17];  // output rows x 16 words; the 17th word spreads the columns over banks
    in += blockIdx.z * in_batch;
    out += blockIdx.z * out_batch;
    const int r0 = blockIdx.y * 64, c0 = blockIdx.x * 64;  // the tile's first input row and column
    const int tr = threadIdx.x / 16, tc = threadIdx.x % 16;

    const int r = r0 + 4 * tr, c = c0 + 4 * tc;
    u32 w0 = 0, w1 = 0, w2 = 0, w3 = 0;
    if (r < rows && c < cols) {
        const u8* p = in + (long long)r * cols + c;
        w0 = __ldg(reinterpret_cast<const u32*>(p));
        w1 = __ldg(reinterpret_cast<const u32*>(p + cols));
        w2 = __ldg(reinterpret_cast<const u32*>(p + 2LL * cols));
        w3 = __ldg(reinterpret_cast<const u32*>(p + 3LL * cols));
    }
    // w_i holds input row i, byte j = column j. Output row j is (w0.j, w1.j, w2.j, w3.j).
    const u32 lo01 = __byte_perm(w0, w1, 0x5140), hi01 = __byte_perm(w0, w1, 0x7362);
    const u32 lo23 = __byte_perm(w2, w3, 0x5140), hi23 = __byte_perm(w2, w3, 0x7362);
    tile[4 * tc + 0][tr] = __byte_perm(lo01, lo23, 0x5410);
    tile[4 * tc + 1][tr] = __byte_perm(lo01, lo23, 0x7632);
    tile[4 * tc + 2][tr] = __byte_perm(hi01, hi23, 0x5410);
    tile[4 * tc + 3][tr] = __byte_perm(hi01, hi23, 0x7632);
    __syncthreads();

    const int orow = threadIdx.x / 4, quarter = threadIdx.x % 4;
    const int oc = c0 + orow, or_ = r0 + 16 * quarter;  // output row (an input column), output column (an input row)
    if (oc < cols && or_ < rows) {
        const u32* t = tile[orow] + 4 * quarter;
        *reinterpret_cast<uint4*>(out + (long long)oc * rows + or_) = make_uint4(t[0], t[1], t[2], t[3]);
    }
}
