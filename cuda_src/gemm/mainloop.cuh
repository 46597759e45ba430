// The math warpgroups' main loops. Per k-block: wait for the stage's `full` barrier, issue the 128-deep
// MMAs of each of the warpgroup's slabs into a fresh tensor-core accumulator, release the stage, and
// promote: scale the accumulator by sa(row) * sb and add it into the FP32 sums (the DeepSeek-V3
// precision fix). The loop variants differ only in how they walk the stage ring and overlap MMA with
// promotion; each is one named function over the shared helpers wait_stage, issue_mma and promote.
#pragma once
#include "ring.cuh"
#include "smem.cuh"
#include "trace.cuh"
#include "../ptx/cluster.cuh"
#include "../ptx/wgmma.cuh"

namespace cg8 {

template <class Cfg>
struct MainLoop {
    static constexpr uint32_t kUnits = Cfg::kUnitsPerWG;
    static constexpr uint32_t kFrag = Cfg::kUnitN / 2;  // accumulator registers per unit and thread
    static constexpr uint32_t kAllUnits = (1u << kUnits) - 1;
    using Walk = RingWalk<Cfg>;
    // Shared-memory addresses formed from one base that a warp reduction pins in a uniform register
    // (the policy's kPinnedBase; with the ring rounds, pinning moved the descriptors off the uniform
    // datapath and spilled, so those loops take the plain address: NOTES.md v11, v15).
    static constexpr bool kPinnedBase = TilePolicy<Cfg>::kPinnedBase && !Walk::kRingRounds;

    // A pass of a tile: its k-blocks, and the first tile column whose B scale is the next scale row: a Const
    // where math.cuh's with_boundary makes it one (promotion then picks each fragment's scale for free), else a
    // run-time value.
    template <class Boundary>
    struct Pass {
        uint32_t kb_begin, kb_end;
        Boundary boundary;
    };

    const SharedMemory<Cfg> sm;
    RingPosition<Cfg>& ring;   // the position in the stage ring (the kernel's)
    uint32_t wg, warp, lane;
    // The registers are the math role's locals, lent here: held in a struct, they were allocated differently
    // and the SASS moved away from the pre-split kernel's (NOTES.md v16).
    float (&acc)[2][kFrag];    // tensor-core accumulators (the second set only where kAccSets == 2)
    float (&sum)[kUnits][kFrag];  // the promoted FP32 sums of this thread's fragments of the tile
    uint32_t smem_base;
    uint32_t smem_a_addr, smem_b_addr, smem_d_addr;
    uint64_t desc_a0, desc_b0;
    bool store_thread;      // issues the output tile's TMA stores
    // The warpgroup index in a form ptxas knows to be warp-uniform, so the A descriptors stay on the
    // uniform datapath. Forward units wider than 128 keep the per-thread form, measured faster there (NOTES.md
    // v11); the weight gradient's loop takes the uniform one at every width (no R2UR a wgmma: 2.1-3.3% faster,
    // v48).
    uint32_t wg_mma;

    __device__ __forceinline__ MainLoop(const SharedMemory<Cfg>& sm_, RingPosition<Cfg>& ring_, float (&acc_)[2][kFrag],
                                        float (&sum_)[kUnits][kFrag], uint32_t wg_, uint32_t tid, uint32_t warp_,
                                        uint32_t lane_)
        : sm(sm_), ring(ring_), wg(wg_), warp(warp_), lane(lane_), acc(acc_), sum(sum_) {
        smem_base = kPinnedBase ? __reduce_or_sync(~0u, smem_addr(sm.base)) : smem_addr(sm.base);
        smem_a_addr = shared(sm.a);
        smem_b_addr = shared(sm.b);
        smem_d_addr = shared(sm.d);
        desc_a0 = smem_desc_sw128(smem_a_addr), desc_b0 = smem_desc_sw128(smem_b_addr);
        store_thread = (wg == 0 && tid < (Cfg::kOutF32 ? 1 : Cfg::kNumAtoms));  // FP32: one issues every atom
        wg_mma = (Cfg::kUnitN <= 128 || Cfg::kRowScalesB) ? __shfl_sync(~0u, wg, 0) : wg;
    }

    // The shared-memory address of `p`.
    __device__ __forceinline__ uint32_t shared(const void* p) const {
        if constexpr (kPinnedBase) return smem_base + uint32_t(static_cast<const uint8_t*>(p) - sm.base);
        else return smem_addr(p);
    }

    __device__ __forceinline__ void clear_sums() {
#pragma unroll
        for (uint32_t w = 0; w < kUnits; ++w)
#pragma unroll
            for (uint32_t i = 0; i < kFrag; ++i) sum[w][i] = 0.f;
    }

    // Every CTA that loaded into (or multicast into) stage `st` must hear that it is free.
    __device__ __forceinline__ void release(uint32_t st) const {
        if constexpr (Cfg::kMulticast > 1) {
            if (lane < Cfg::kMulticast) mbar_arrive_cluster(&sm.empty[st], lane);
        } else {
            if (lane == 0) mbar_arrive(shared(&sm.empty[st]));
        }
    }

    // Waits for k-block `kb`'s stage `st` and returns its promotion scales for each unit w:
    // {sa(r0) sb0, sa(r1) sb0, sa(r0) sb1, sa(r1) sb1} (r1 = r0 + 8; sb1 for columns past the boundary; with
    // column halves, the second half's unit takes sb1 throughout).
    __device__ __forceinline__ void wait_stage(uint32_t kb, float (&scale)[kUnits][4], uint32_t st) const {
        float sb0, sb1;
        CG8_MARK_KB(kTraceKbWait, kb);
        if constexpr (kPinnedBase) {
            sb0 = ld_shared_f32(shared(sm.sb + kb));
            sb1 = Cfg::kScaleRowsPerTile > 1 ? ld_shared_f32(shared(sm.sb + Cfg::kNumKBlocks + kb)) : sb0;
            mbar_wait(shared(&sm.full[st]), ring.phase);
        } else {
            sb0 = sm.sb[kb], sb1 = Cfg::kScaleRowsPerTile > 1 ? sm.sb[Cfg::kNumKBlocks + kb] : sb0;
            mbar_wait(&sm.full[st], ring.phase);
        }
        CG8_MARK_KB(kTraceKbReady, kb);
        const float* sa = sm.sa + st * Cfg::kBlockM;
#pragma unroll
        for (uint32_t w = 0; w < kUnits; ++w) {
            const uint32_t row = Cfg::slab(wg, w) * 64 + warp * 16 + lane / 4;
            float sa0, sa1;
            if constexpr (kPinnedBase) sa0 = ld_shared_f32(shared(sa + row)), sa1 = ld_shared_f32(shared(sa + row + 8));
            else sa0 = sa[row], sa1 = sa[row + 8];
            const float sbu = Cfg::unit_col(w) < 128 ? sb0 : sb1;  // the unit's first column's scale row
            scale[w][0] = sa0 * sbu, scale[w][1] = sa1 * sbu, scale[w][2] = sa0 * sb1, scale[w][3] = sa1 * sb1;
        }
    }

    // One 128-deep k-block (in stage `st`) of slab `w` into `d`: issued and committed, not waited for.
    __device__ __forceinline__ void issue_mma(float (&d)[kFrag], uint32_t w, uint32_t st) const {
#ifdef CG8_PROBE_NO_MMA  // benchmarks.ablation_probe only: the loop waits for and releases its stages, no MMAs
        return;
#endif
#pragma unroll
        for (uint32_t i = 0; i < kFrag; ++i) fence_operand(d[i]);
        wgmma_fence();
        // Offsets in 16-byte descriptor units (every term a multiple of 16 bytes).
        const uint32_t a_off = st * (SmemLayout<Cfg>::kStageA / 16) + Cfg::slab(wg_mma, w) * (64 * kBlockK / 16);
        const uint32_t b_off = st * (SmemLayout<Cfg>::kStageB / 16) + Cfg::unit_col(w) * (kBlockK / 16);
#pragma unroll
        for (uint32_t k = 0; k < kBlockK / 32; ++k)
            WgmmaFp8<Cfg::kUnitN>::mma(d, smem_desc_add(desc_a0, a_off + k * 2), smem_desc_add(desc_b0, b_off + k * 2), k);
        wgmma_commit();
    }

    // Promotion: scale a finished 128-deep partial sum and add it into the FP32 sums.
    template <class Boundary>
    __device__ __forceinline__ void promote(float (&f)[kFrag], float (&d)[kFrag], const float (&sc)[4],
                                            Boundary boundary) const {
#pragma unroll
        for (uint32_t i = 0; i < kFrag; ++i) fence_operand(d[i]);
#ifdef CG8_PROBE_NO_PROMOTE  // benchmarks.ablation_probe only: one product kept, so the MMAs stay needed
        f[0] += sc[0] * d[0];
        return;
#endif
#pragma unroll
        for (uint32_t i = 0; i < Cfg::kUnitN / 8; ++i) {
            const bool first = !Cfg::kMayStraddle || i * 8 < boundary;
            const float s0 = first ? sc[0] : sc[2], s1 = first ? sc[1] : sc[3];
            f[i * 4 + 0] += s0 * d[i * 4 + 0];
            f[i * 4 + 1] += s0 * d[i * 4 + 1];
            f[i * 4 + 2] += s1 * d[i * 4 + 2];
            f[i * 4 + 3] += s1 * d[i * 4 + 3];
        }
    }

    // No slab of this warpgroup computes in k-blocks kb_begin .. kb_end - 1 (an idle pass, or a pair's padding
    // stages): walk the ring along with the other warpgroup, and the peer CTA.
    __device__ __forceinline__ void walk_idle(uint32_t kb_begin, uint32_t kb_end) {
#pragma unroll 1
        for (uint32_t kb = kb_begin; kb < kb_end; ++kb) {
            mbar_wait(shared(&sm.full[ring.stage]), ring.phase);
            release(ring.stage);
            ring.advance();
        }
    }

    // One accumulator: per k-block, each slab's MMAs then its promotion; the other math warpgroup's
    // MMAs fill the tensor cores meanwhile. kEvery: every slab works (else those in `slabs`).
    template <bool kEvery, bool kWhole, class P>
    __device__ __forceinline__ void one_accumulator(const P& p, uint32_t slabs) {
        const uint32_t last = kEvery ? kUnits - 1 : 31 - __clz(slabs);
        float scale[kUnits][4];
        auto kblock = [&](uint32_t kb, uint32_t st) {
            wait_stage(kb, scale, st);
#pragma unroll
            for (uint32_t w = 0; w < kUnits; ++w) {
                if (!kEvery && !((slabs >> w) & 1u)) continue;
                issue_mma(acc[0], w, st);
                wgmma_wait<0>();
                if (w == last) release(st);  // the stage is no longer needed: release it before promoting
                promote(sum[w], acc[0], scale[w], p.boundary);
            }
        };
        if constexpr (Walk::kAlignStages && kWhole) stage_aligned(kblock);
        else if constexpr (Walk::kRingRounds) ring_rounds(kblock);
        else rolled(p, kblock);
    }

    template <class P, class KBlock>
    __device__ __forceinline__ void rolled(const P& p, KBlock&& kblock) {
#pragma unroll 1
        for (uint32_t kb = p.kb_begin; kb < p.kb_end; ++kb) {
            kblock(kb, ring.stage);
            ring.advance();
        }
    }

    // k-block kb in stage kb % kStages: the stage a compile-time constant in each unrolled copy. The
    // stages the last round leaves unused are passed through, as the producer does.
    template <class KBlock>
    __device__ __forceinline__ void stage_aligned(KBlock&& kblock) {
        constexpr uint32_t kRounds = Cfg::kNumKBlocks / Cfg::kStages, kRest = Cfg::kNumKBlocks % Cfg::kStages;
#pragma unroll 1
        for (uint32_t r = 0; r < kRounds; ++r) {
            static_for<0, Cfg::kStages>([&](auto st) { kblock(r * Cfg::kStages + st.value, st.value); });
            ring.phase ^= 1;
        }
        if constexpr (kRest > 0) {
            static_for<0, kRest>([&](auto st) { kblock(kRounds * Cfg::kStages + st.value, st.value); });
            static_for<kRest, Cfg::kStages>([&](auto st) {
                mbar_wait(&sm.full[st.value], ring.phase);
                release(st.value);
            });
            ring.phase ^= 1;
        }
    }

    // Rolled k-blocks up to stage 0, whole rounds of the ring (the stage a compile-time constant in
    // each copy), rolled again for the rest.
    template <class KBlock>
    __device__ __forceinline__ void ring_rounds(KBlock&& kblock) {
        uint32_t kb = 0;
#pragma unroll 1
        for (; ring.stage != 0; ++kb) {  // at most kStages - 1 <= kNumKBlocks k-blocks
            kblock(kb, ring.stage);
            ring.advance();
        }
#pragma unroll 1
        for (uint32_t r = (Cfg::kNumKBlocks - kb) / Cfg::kStages; r != 0; --r, kb += Cfg::kStages) {
            static_for<0, Cfg::kStages>([&](auto st) { kblock(kb + st.value, st.value); });
            ring.phase ^= 1;
        }
#pragma unroll 1
        for (; kb < Cfg::kNumKBlocks; ++kb) {
            kblock(kb, ring.stage);
            ring.advance();
        }
    }

    // Two accumulators (one slab): k-block kb's MMAs run while kb-1 is promoted, so the MMA latency is
    // hidden even when this is the only math warpgroup.
    template <class P>
    __device__ __forceinline__ void two_accumulators(const P& p) {
        float scale0[kUnits][4], scale1[kUnits][4];  // kUnits == 1 here
        uint32_t stage0, stage1;
        auto retire = [&](float (&d)[kFrag], const float (&sc)[kUnits][4], uint32_t st) {
            release(st);
            promote(sum[0], d, sc[0], p.boundary);
        };
        // Waits for k-block kb's stage, issues its MMAs into `d`, remembers the stage.
        auto start = [&](uint32_t kb, float (&d)[kFrag], float (&sc)[kUnits][4], uint32_t& st) {
            wait_stage(kb, sc, ring.stage);
            issue_mma(d, 0, ring.stage);
            st = ring.stage;
            ring.advance();
        };
        start(p.kb_begin, acc[0], scale0, stage0);
        uint32_t kb = p.kb_begin + 1;
#pragma unroll 1
        for (; kb + 1 < p.kb_end; kb += 2) {
            start(kb, acc[1], scale1, stage1);
            wgmma_wait<1>();
            retire(acc[0], scale0, stage0);
            start(kb + 1, acc[0], scale0, stage0);
            wgmma_wait<1>();
            retire(acc[1], scale1, stage1);
        }
        if (kb < p.kb_end) {
            start(kb, acc[1], scale1, stage1);
            wgmma_wait<1>();
            retire(acc[0], scale0, stage0);
            wgmma_wait<0>();
            retire(acc[1], scale1, stage1);
        } else {
            wgmma_wait<0>();
            retire(acc[0], scale0, stage0);
        }
    }

    // 1x128 B scales (the weight gradient; one slab per warpgroup, one accumulator): per k-block this thread's A
    // scales and B scales (one per column it holds) from the stage, the MMAs, the stage released once they are
    // done, then each column's partial sum scaled by its B scale, then its A scale. The scales are read before
    // the MMAs are issued and applied only to their results: loaded after, ptxas put the products sa * sb
    // between the wgmmas, so the last wgmma waited for the loads (NOTES.md v23).
    __device__ __forceinline__ void row_scales(uint32_t kb_begin, uint32_t kb_end) {
        static_assert(Cfg::kRowScalesB && kUnits == 1, "row_scales is the weight gradient's loop");
        const uint32_t row = wg * 64 + warp * 16 + lane / 4;
#pragma unroll 1
        for (uint32_t kb = kb_begin; kb < kb_end; ++kb) {
            const uint32_t st = ring.stage;
            CG8_MARK_KB(kTraceKbWait, kb);
            mbar_wait(&sm.full[st], ring.phase);
            CG8_MARK_KB(kTraceKbReady, kb);
            const float* sa = sm.sa + st * Cfg::kBlockM;
            const float sa0 = sa[row], sa1 = sa[row + 8];
            // Columns i * 8 + 2 * (lane % 4) + {0, 1}: one 8-byte load per fragment (the quad's lanes read
            // 32 consecutive bytes, the other quads the same: one wavefront).
            const float* sb = sm.sb_rows + st * (SmemLayout<Cfg>::kStageSB / 4) + 2 * (lane % 4);
            float2 sbc[Cfg::kBlockN / 8];
#pragma unroll
            for (uint32_t i = 0; i < Cfg::kBlockN / 8; ++i) sbc[i] = *reinterpret_cast<const float2*>(sb + i * 8);
            issue_mma(acc[0], 0, st);
            wgmma_wait<0>();
            release(st);
#pragma unroll
            for (uint32_t i = 0; i < kFrag; ++i) fence_operand(acc[0][i]);
#ifdef CG8_PROBE_NO_PROMOTE  // benchmarks.ablation_probe, wgrad_probe only: one product kept
            sum[0][0] += sa0 * (sbc[0].x * acc[0][0]);
            ring.advance();
            continue;
#endif
#pragma unroll
            for (uint32_t i = 0; i < Cfg::kBlockN / 8; ++i) {
                sum[0][i * 4 + 0] += sa0 * (sbc[i].x * acc[0][i * 4 + 0]);
                sum[0][i * 4 + 1] += sa0 * (sbc[i].y * acc[0][i * 4 + 1]);
                sum[0][i * 4 + 2] += sa1 * (sbc[i].x * acc[0][i * 4 + 2]);
                sum[0][i * 4 + 3] += sa1 * (sbc[i].y * acc[0][i * 4 + 3]);
            }
            ring.advance();
        }
    }

    // A tile with passes ran the rolled loop: with the stage-aligned walk the next tile must start at
    // stage 0 again, so the stages this one leaves unused are passed through, as the producer does.
    __device__ __forceinline__ void realign() {
        for (; ring.stage != 0; ring.advance()) {
            mbar_wait(shared(&sm.full[ring.stage]), ring.phase);
            release(ring.stage);
        }
    }
};

}  // namespace cg8
