// The FP8 GEMM kernel's entry point, one configuration per compile. cugemm8/fp8_gemm.py renders the
// translation unit: it defines cg8::Config (a GemmConfig), CG8_CLUSTER_DIMS where clusters are
// launched, and includes this file. d_scale and ld_scale serve e4m3 output only (its scales' M-major
// storage and leading dimension, as A's scales are laid out). The weight gradient has its own entry
// (fp8_wgrad.cu); here B's 1x128-scale map and K, which the forward kernels do not use, are A's map and 0.
// tmap_a_tail and tmap_sa_tail are A and its scales with boxes of the last m-block's rows (producer.cuh).
#include "gemm/kernel.cuh"

#ifndef CG8_CLUSTER_DIMS
#define CG8_CLUSTER_DIMS
#endif

extern "C" __global__ void __launch_bounds__(cg8::Config::kThreads, 1) CG8_CLUSTER_DIMS
cugemm8_fp8_gemm(const __grid_constant__ CUtensorMap tmap_a, const __grid_constant__ CUtensorMap tmap_b,
                 const __grid_constant__ CUtensorMap tmap_sa, const __grid_constant__ CUtensorMap tmap_d,
                 const __grid_constant__ CUtensorMap tmap_a_tail, const __grid_constant__ CUtensorMap tmap_sa_tail,
                 const float* __restrict__ sb, const int* __restrict__ layout, unsigned short* __restrict__ d,
                 unsigned int ldd, unsigned int m, float* __restrict__ d_scale, unsigned int ld_scale) {
    cg8::fp8_gemm<cg8::Config>(tmap_a, tmap_b, tmap_sa, tmap_d, sb, layout, d, ldd, m, d_scale, ld_scale, tmap_sa, 0u,
                              tmap_a_tail, tmap_sa_tail);
}
