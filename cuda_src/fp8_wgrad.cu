// The weight gradient's entry point: the same kernel (gemm/kernel.cuh) with 1x128 scales on B, K at run
// time and FP32 output added into D (cg8::Config's kScaleB, kShapeK = 0, kOutFormat). cugemm8/fp8_gemm.py
// renders the translation unit as for the forward GEMMs and includes this file instead of fp8_gemm.cu.
//   tmap_sb  B's scales, M-major as A's ([ceil(K/128)][N rounded up to 4] floats)
//   tmap_d   D as [groups][M][N] FP32 (the normal layout: one group)
//   k_sizes  the k-grouped layout: each group's K (int32, on the GPU); unused by the normal layout
//   m, k     rows of A and D; columns of A and B (the k-grouped layout: all groups')
//   tmap_a_tail, tmap_sa_tail   A and its scales with boxes of the last m-block's rows (producer.cuh)
#include "gemm/kernel.cuh"

extern "C" __global__ void __launch_bounds__(cg8::Config::kThreads, 1)
cugemm8_fp8_wgrad(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                  const __grid_constant__ CUtensorMap tmap_sa, const __grid_constant__ CUtensorMap tmap_sb,
                  const __grid_constant__ CUtensorMap tmap_d, const __grid_constant__ CUtensorMap tmap_a_tail,
                  const __grid_constant__ CUtensorMap tmap_sa_tail, const int* __restrict__ k_sizes, unsigned int m,
                  unsigned int k) {
    static_assert(cg8::Config::kRowScalesB, "fp8_wgrad.cu serves the weight-gradient configurations");
    cg8::fp8_gemm<cg8::Config>(tmap_a, tmap_b, tmap_sa, tmap_d, nullptr, k_sizes, nullptr, 0u, m, nullptr, 0u, tmap_sb, k,
                              tmap_a_tail, tmap_sa_tail);
}
