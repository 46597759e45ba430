// A split tile's shares meet. The kSplits CTAs of a cluster each computed a share of the tile's k-blocks
// over the whole tile; CTA rank r owns column chunk r (config.cuh's chunk_first) and stores it. Each
// pushes its partial sums of every other chunk into that chunk owner's inbox in shared memory (st.async,
// counted on the owner's `received` barrier) once the owner said `ready`, then adds up its own chunk in
// rank order: share 0 + share 1 + ... The order is fixed, so results are bitwise repeatable.
//
// The inbox overlays the output tile (smem.cuh): a slot per sending peer, per 16-byte vector of the
// chunk, per math thread. Used by the masked layout's split last wave (two CTAs) and the normal layout's
// split K (kSplitK CTAs). With e4m3 output the CTAs then share each row's amax; CTAs sharing a scale group
// (kGroupCtas, unsplit) share only that.
#pragma once
#include "config.cuh"
#include "smem.cuh"
#include "../ptx/cluster.cuh"
#include "../ptx/mbarrier.cuh"
#include "../ptx/tma.cuh"

namespace cg8 {

template <class Cfg>
struct SplitExchange {
    static constexpr uint32_t kSplits = Cfg::kSplits;
    // A thread's 16-byte vectors of chunk c (an inbox slot holds the largest chunk's).
    __host__ __device__ static constexpr uint32_t chunk_vecs(uint32_t c) { return Cfg::kUnitsPerWG * Cfg::chunk_frags(c); }
    static constexpr uint32_t kSlotVecs = Cfg::kUnitsPerWG * Cfg::kMaxChunkFrags;
    static constexpr uint32_t kInboxBytes = (kSplits - 1) * kSlotVecs * Cfg::kMathThreads * 16;
    // The bytes the peers push into the inbox of rank's chunk (less than the inbox where chunks are uneven).
    __device__ __forceinline__ static uint32_t inbox_bytes(uint32_t rank) {
        if constexpr (Cfg::kEvenChunks) return kInboxBytes;
        else return (kSplits - 1) * chunk_vecs(rank) * Cfg::kMathThreads * 16;
    }
    static_assert(kInboxBytes == SmemLayout<Cfg>::kInbox, "the inbox is laid out in smem.cuh");

    // Before the tile's B scales are staged: the peers will push into this CTA's inbox, which overlays the
    // output tile, so the previous tile's TMA store must be done reading it (the staging barrier orders
    // the other readers).
    __device__ __forceinline__ static void before_staging(bool store_thread) {
        if (store_thread) bulk_wait_group_read();
    }

    // With e4m3 output, each peer's amax of every row of the tile (over its chunk, or its tile).
    static constexpr uint32_t kPeers = Cfg::kExchangeCtas;
    static constexpr uint32_t kAmaxBytes = (kPeers - 1) * Cfg::kBlockM * 4;

    // After the staging barrier: the bytes to expect, then tell every peer it may send.
    __device__ __forceinline__ static void signal_ready(uint64_t* ready, uint64_t* received, uint64_t* amax_received,
                                                        uint32_t rank) {
        if (threadIdx.x == 0) {
            if constexpr (kSplits > 1) mbar_arrive_expect_tx(received, inbox_bytes(rank));
            if constexpr (Cfg::kOutFp8) mbar_arrive_expect_tx(amax_received, kAmaxBytes);
#pragma unroll
            for (uint32_t peer = 0; peer < kPeers; ++peer)
                if (peer != rank) mbar_arrive_cluster(ready, peer);
        }
    }

    // Byte offset in an inbox of the slot for sender `from` (of the owner `to`), vector j, this thread.
    __device__ __forceinline__ static uint32_t slot(uint32_t from, uint32_t to, uint32_t j) {
        const uint32_t q = from < to ? from : from - 1;  // the owner has no slot for itself
        return ((q * kSlotVecs + j) * Cfg::kMathThreads + threadIdx.x) * 16;
    }

    // Vector j of chunk c in this thread's sums: unit j / chunk_frags(c), fragment chunk_first(c) + j % chunk_frags(c).
    template <uint32_t c, class Loop>
    __device__ __forceinline__ static float* vec(Loop& loop, uint32_t j) {
        return &loop.sum[j / Cfg::chunk_frags(c)][(Cfg::chunk_first(c) + j % Cfg::chunk_frags(c)) * 4];
    }

    // The exchange, `phase`: the parity of this CTA's split tiles so far. Chunks are walked at compile
    // time (the sums must stay in registers); `rank` selects this CTA's role in each.
    template <class Loop>
    __device__ __forceinline__ static void exchange(Loop& loop, uint64_t* ready, uint64_t* received, uint32_t rank,
                                                    uint32_t phase) {
        mbar_wait(loop.shared(ready), phase);
        static_for<0, kSplits>([&](auto owner) {
            constexpr uint32_t c = owner.value;
            if (c == rank) return;
            const uint32_t inbox = map_shared_rank(loop.smem_d_addr, c);
            const uint32_t inbox_received = map_shared_rank(loop.shared(received), c);
#pragma unroll
            for (uint32_t j = 0; j < chunk_vecs(c); ++j) {
                const float* f = vec<c>(loop, j);
                st_async_v4(inbox + slot(rank, c, j), f[0], f[1], f[2], f[3], inbox_received);
            }
        });
        mbar_wait(loop.shared(received), phase);
        static_for<0, kSplits>([&](auto owner) {
            constexpr uint32_t c = owner.value;
            if (c != rank) return;
#pragma unroll
            for (uint32_t j = 0; j < chunk_vecs(c); ++j) {
                float* f = vec<c>(loop, j);
                float x[4];
                static_for<0, kSplits>([&](auto share) {
                    constexpr uint32_t s = share.value;
                    float p[4];
                    if constexpr (s == c) {
                        p[0] = f[0], p[1] = f[1], p[2] = f[2], p[3] = f[3];
                    } else {
                        ld_shared_v4(loop.smem_d_addr + slot(s, c, j), p[0], p[1], p[2], p[3]);
                    }
#pragma unroll
                    for (uint32_t e = 0; e < 4; ++e) x[e] = s == 0 ? p[e] : x[e] + p[e];
                });
                f[0] = x[0], f[1] = x[1], f[2] = x[2], f[3] = x[3];
            }
        });
    }

    // e4m3 output, after the exchange (kSplits > 1; CTAs sharing a scale group have none, so they first wait
    // for their peers' `ready` here): `amax` holds, per slab and row half, the amax of this thread's row over
    // this CTA's chunk or tile (shared by the quad); it comes back as the amax over the whole group's row. The
    // quad's first lane sends it to every peer's inbox (slot of this sender, the row); max is order-free, so
    // the result is the same whichever peer answers first. The inbox is reused by the next tile only after
    // its `ready`, which a peer signals after this tile's epilogue.
    template <class Loop>
    __device__ __forceinline__ static void exchange_amax(Loop& loop, float (&amax)[Cfg::kUnitsPerWG][2],
                                                         uint64_t* ready, float* inbox, uint64_t* amax_received,
                                                         uint32_t rank, uint32_t phase) {
#ifdef CG8_PROBE_NO_AMAX_EXCHANGE  // benchmarks.ablation_probe only: each CTA keeps its own amax (wrong scales)
        return;
#endif
        const uint32_t row0 = Cfg::slab(loop.wg, 0) * 64 + loop.warp * 16 + loop.lane / 4;
        if constexpr (kSplits == 1) mbar_wait(loop.shared(ready), phase);  // (split tiles waited in exchange())
        if (loop.lane % 4 == 0) {
#pragma unroll
            for (uint32_t peer = 0; peer < kPeers; ++peer) {
                if (peer == rank) continue;
                const uint32_t q = rank < peer ? rank : rank - 1;  // the peer has no slot for itself
                const uint32_t to = map_shared_rank(loop.shared(inbox + q * Cfg::kBlockM), peer);
                const uint32_t bar = map_shared_rank(loop.shared(amax_received), peer);
#pragma unroll
                for (uint32_t w = 0; w < Cfg::kUnitsPerWG; ++w)
#pragma unroll
                    for (uint32_t h = 0; h < 2; ++h) st_async_f32(to + (row0 + Cfg::unit_row(w) + h * 8) * 4, amax[w][h], bar);
            }
        }
        mbar_wait(loop.shared(amax_received), phase);
#pragma unroll
        for (uint32_t q = 0; q + 1 < kPeers; ++q)
#pragma unroll
            for (uint32_t w = 0; w < Cfg::kUnitsPerWG; ++w)
#pragma unroll
                for (uint32_t h = 0; h < 2; ++h)
                    amax[w][h] = fmaxf(amax[w][h],
                                       ld_shared_f32(loop.shared(inbox + q * Cfg::kBlockM + row0 + Cfg::unit_row(w) + h * 8)));
    }
};

}  // namespace cg8
