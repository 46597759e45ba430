// A workspace group (kWorkspaceGroup > 1): e4m3 output of the normal layout in the narrow tiles bf16 picks at
// decode-sized M, where the CTAs of one 128-column scale group cannot be one resident cluster (the tiles are split
// K over pairs, or clusters of 4 would exceed the 120 CTAs that fit). The group's owners (each tile's CTA, or each
// split CTA for its column chunk) meet in global memory instead:
//   1. every owner writes its FP32 sums to its part of the group's slot, then adds 1 to the slot's counter;
//   2. the owner whose add completes the count (the last to arrive) resets the counter, reads the other parts
//      and quantizes the whole group: each row's amax over the 128 columns, its scale, the e4m3 bytes, stored by
//      the threads.
// No CTA waits for another CTA's progress, so any grid is safe (no co-residency needed), and the result does not
// depend on who arrives last: the group's sums are the same bits whichever CTA reads them.
//
// No memory fence: a GPU-scope fence costs microseconds (NOTES.md v10, v33). Each value is stored beside a tag in
// one 8-byte word, written and read whole (single-copy atomic), so the last owner knows a value is this launch's by
// its tag and reloads the few that have not landed yet (they will: their owners stored them before arriving). The
// tag is the slot's epoch + 1: each slot holds a count of arrivals and an epoch, both zero in a new workspace
// (cugemm8/workspace.py); every owner reads the epoch when its tile starts, and the last owner sets the count to 0
// and the epoch to the tag for the next launch. One launch at a time may use a workspace (cugemm8/workspace.py
// keeps one per device and stream).
//
// Workspace layout (cugemm8/workspace.py computes the same bytes): per slot (m-block x 128-column group) a u32 count
// and a u32 epoch, rounded up to 256 bytes; then per slot kParts parts of kPartBytes, each laid out vector-major
// ([vector j][math thread][4 tagged values]) so that every thread's stores and loads are whole, coalesced lines.
#pragma once
#include "config.cuh"
#include "epilogue.cuh"
#include "tile.cuh"
#include "../ptx/memory.cuh"

namespace cg8 {

template <class Cfg>
struct GroupWorkspace {
    using Out = Epilogue<Cfg>;
    static constexpr uint32_t kSlabs = Cfg::kSlabsPerWG;
    static constexpr uint32_t kParts = Cfg::kWorkspaceGroup * Cfg::kSplits;  // column chunks of a group
    static constexpr uint32_t kChunkFrags = Cfg::kBlockN / 8 / Cfg::kSplits;  // 8-column fragments of a chunk
    static constexpr uint32_t kChunkVecs = kSlabs * kChunkFrags;               // a thread's 4-value vectors
    static constexpr uint32_t kVecBytes = 32;                                  // 4 values, each with its tag
    static constexpr uint32_t kPartBytes = kChunkVecs * Cfg::kMathThreads * kVecBytes;
    static constexpr uint32_t kGroupsN = (Cfg::kShapeN + 127) / 128;
    static constexpr uint32_t kGroupFrags = 128 / 8;
    static_assert(kParts * kChunkFrags == kGroupFrags, "the parts make up the group's 128 columns");
    // Probes (benchmarks.group_probe; the library never defines them; results wrong, timing only): no part stored
    // or read, or the group read and not quantized.
#ifdef CG8_PROBE_WS_NO_READ
    static constexpr bool kProbeNoRead = true;
#else
    static constexpr bool kProbeNoRead = false;
#endif
#ifdef CG8_PROBE_WS_NO_QUANTIZE
    static constexpr bool kProbeNoQuantize = true;
#else
    static constexpr bool kProbeNoQuantize = false;
#endif

    __device__ __forceinline__ static uint32_t counter_bytes(uint32_t num_m_blocks) {
        return (num_m_blocks * kGroupsN * 8 + 255) / 256 * 256;
    }

    __device__ __forceinline__ static uint32_t* slot_words(uint8_t* ws, uint32_t m_block, uint32_t n0) {
        return reinterpret_cast<uint32_t*>(ws) + 2 * (m_block * kGroupsN + n0 / 128);
    }

    // The tag of this launch's parts of the tile's slot: its epoch + 1 (read when the tile starts, so that the load
    // is long done by the epilogue).
    __device__ __forceinline__ static uint32_t tag_for(uint8_t* ws, uint32_t m_block, uint32_t n0) {
        return ld_relaxed_gpu_u32(slot_words(ws, m_block, n0) + 1) + 1;
    }

    __device__ __forceinline__ static unsigned long long tagged(float v, uint32_t tag) {
        return (static_cast<unsigned long long>(tag) << 32) | __float_as_uint(v);
    }

    // The tile's chunk `chunk` (this CTA's: 0 unless split) of `sum` meets the rest of its scale group; the last
    // owner to arrive stores the group to d (row stride ldd bytes) and its scales to d_scale (M-major, ld_scale).
    // Called by every math thread (`tid`: 0 .. kMathThreads - 1); rows past `m` are neither read nor stored.
    template <uint32_t kWidth>
    __device__ __forceinline__ static void meet(const float (&sum)[kSlabs][kWidth], uint8_t* __restrict__ ws,
                                                uint32_t tag, uint32_t num_m_blocks, uint32_t m, uint32_t m_block,
                                                uint32_t n0, uint32_t chunk, uint8_t* __restrict__ d, uint32_t ldd,
                                                float* __restrict__ d_scale, uint32_t ld_scale, uint32_t wg,
                                                uint32_t tid, uint32_t warp, uint32_t lane) {
        const uint32_t group = n0 / 128, slot = m_block * kGroupsN + group;
        const uint32_t part = (n0 % 128) / Cfg::kBlockN * Cfg::kSplits + chunk;
        uint32_t* const words = slot_words(ws, m_block, n0);  // the count, then the epoch
        uint8_t* const slot_data =
            ws + counter_bytes(num_m_blocks) + uint64_t(slot) * kParts * kPartBytes + tid * kVecBytes;

        // 1. This owner's part, then its arrival (after every thread's stores were issued).
        static_for<0, Cfg::kSplits>([&](auto c) {
            if (c.value != chunk || kProbeNoRead) return;  // (the probe: no part stored, none read)
#pragma unroll
            for (uint32_t j = 0; j < kChunkVecs; ++j) {
                const float* f = &sum[j / kChunkFrags][(c.value * kChunkFrags + j % kChunkFrags) * 4];
                uint8_t* p = slot_data + part * kPartBytes + j * Cfg::kMathThreads * kVecBytes;
                st_global_v2_u64(p, tagged(f[0], tag), tagged(f[1], tag));
                st_global_v2_u64(p + 16, tagged(f[2], tag), tagged(f[3], tag));
            }
        });
        named_barrier_sync(1, Cfg::kMathThreads);
        // Tiles of the group that exist (the last group of an N that is not a multiple of 128 has fewer).
        const uint32_t owners = min(Cfg::kWorkspaceGroup, Cfg::kNumNBlocks - group * Cfg::kWorkspaceGroup) * Cfg::kSplits;
        bool last = false;
        if (tid == 0) {
            last = atomicAdd(words, 1u) == owners - 1;
            if (last) {  // for the next launch: no arrival yet, and its tag
                reinterpret_cast<volatile uint32_t*>(words)[0] = 0u;
                reinterpret_cast<volatile uint32_t*>(words)[1] = tag;
            }
        }
        if (!named_barrier_or(1, Cfg::kMathThreads, last)) return;

        // 2. The last owner: the group's sums in the fragment layout of a 128-wide tile (its own part from its
        // registers, parts past N as zeros), every loaded value checked for this launch's tag.
        float g[kSlabs][kGroupFrags * 4];
        static_for<0, kParts>([&](auto p) {
            static_for<0, Cfg::kSplits>([&](auto c) {
                if (p.value != part || c.value != chunk) return;
#pragma unroll
                for (uint32_t j = 0; j < kChunkVecs; ++j)
#pragma unroll
                    for (uint32_t e = 0; e < 4; ++e)
                        g[j / kChunkFrags][(p.value * kChunkFrags + j % kChunkFrags) * 4 + e] =
                            sum[j / kChunkFrags][(c.value * kChunkFrags + j % kChunkFrags) * 4 + e];
            });
        });
        bool landed;
        do {
            landed = true;
            static_for<0, kParts>([&](auto p) {
                if (p.value == part) return;
                const bool present = p.value < owners && !kProbeNoRead;
#pragma unroll
                for (uint32_t j = 0; j < kChunkVecs; ++j) {
                    float* f = &g[j / kChunkFrags][(p.value * kChunkFrags + j % kChunkFrags) * 4];
                    unsigned long long w[4] = {0ull, 0ull, 0ull, 0ull};
                    if (present) {
                        const uint8_t* q = slot_data + p.value * kPartBytes + j * Cfg::kMathThreads * kVecBytes;
                        ld_relaxed_gpu_v2_u64(q, w[0], w[1]);
                        ld_relaxed_gpu_v2_u64(q + 16, w[2], w[3]);
                    }
#pragma unroll
                    for (uint32_t e = 0; e < 4; ++e) {
                        f[e] = __uint_as_float(uint32_t(w[e]));
                        landed = landed && (!present || uint32_t(w[e] >> 32) == tag);
                    }
                }
            });
        } while (!landed);

        if constexpr (kProbeNoQuantize) {  // (the probe: the group read, nothing stored)
            float x = 0.f;
#pragma unroll
            for (uint32_t i = 0; i < kGroupFrags * 4; ++i) x += g[0][i];
            if (x == 1.2345f) d_scale[0] = x;
            return;
        }
        typename Out::RowValues amax, s, inv;
        Out::template rows_amax<0, kGroupFrags>(g, amax);
        Out::row_scales(amax, s, inv);
        const uint32_t m0 = m_block * Cfg::kBlockM, valid = min(m - m0, Cfg::kBlockM);
        const uint32_t row0 = Cfg::slab(wg, 0) * 64 + warp * 16 + lane / 4;
        const uint32_t col0 = group * 128 + 2 * (lane % 4);
#pragma unroll
        for (uint32_t w = 0; w < kSlabs; ++w)
#pragma unroll
            for (uint32_t h = 0; h < 2; ++h) {
                const uint32_t row = row0 + w * Cfg::kSlabStride + h * 8;
                if (row >= valid) continue;
                uint8_t* out = d + uint64_t(m0 + row) * ldd + col0;
#pragma unroll
                for (uint32_t i = 0; i < kGroupFrags; ++i)
                    if (col0 + i * 8 < Cfg::kShapeN)
                        st_global_u16(out + i * 8, f32x2_to_e4m3x2_sat(__fmul_rn(g[w][i * 4 + 2 * h], inv[w][h]),
                                                                        __fmul_rn(g[w][i * 4 + 2 * h + 1], inv[w][h])));
                if (lane % 4 == 0) d_scale[uint64_t(group) * ld_scale + m0 + row] = s[w][h];
            }
    }
};

}  // namespace cg8
