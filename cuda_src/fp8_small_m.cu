// The small-M kernel's entry point (the kernel is small_m.cuh), one configuration per compile:
// cugemm8/small_m.py renders the translation unit, which defines cg8::SmallM (a SmallMConfig) and
// CG8_CLUSTER_DIMS where the k-blocks are split over a cluster, and includes this file.
#ifndef CG8_CLUSTER_DIMS
#define CG8_CLUSTER_DIMS
#endif

extern "C" __global__ void __launch_bounds__(cg8::SmallM::kThreads, 1) CG8_CLUSTER_DIMS
cugemm8_fp8_small_m(const unsigned char* __restrict__ a, const float* __restrict__ sa,
                    const unsigned char* __restrict__ b, const float* __restrict__ sb, unsigned short* __restrict__ d,
                    unsigned int m, unsigned int a_ld, unsigned int b_ld, unsigned int sa_ld, unsigned int d_ld) {
    cg8::small_m_gemm<cg8::SmallM>(a, sa, b, sb, d, m, a_ld, b_ld, sa_ld, d_ld);
}
