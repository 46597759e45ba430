// The contiguous layout's tile records: the producer warpgroup's second warp (the record warp) reads
// each tile's m_indices and publishes a record, up to kRecordSlots tiles ahead, into a ring in shared
// memory; the math threads take it when the tile's turn comes. They then hold no m_indices load in
// flight through the main loop: with such loads, ptxas spilled the tile code (NOTES.md v12-v14).
//
// A record: each slab's expert id (the id of its first row, -1 past M), then one bit per row that is
// no expert's (an id < 0 or >= G: those rows come out as zeros), then for pairs sharing B the peer tile's
// pass count. Slot n % kSlots holds the n-th tile's;
// `full` (1 arrival: the record warp) and `empty` (kMathThreads arrivals) guard each slot.
#pragma once
#include "config.cuh"
#include "../ptx/mbarrier.cuh"

namespace cg8 {

template <class Cfg>
struct RecordRing {
    static constexpr uint32_t kSlots = Cfg::kRecordSlots;
    static constexpr uint32_t kWords = Cfg::kSlabsPerTile + Cfg::kBlockM / 32 + (Cfg::kShareB ? 1 : 0);  // per record
    static constexpr uint32_t kBytes = (kSlots * kWords * 4 + 15) / 16 * 16;

    int32_t* words;
    uint64_t* full;
    uint64_t* empty;

    __device__ __forceinline__ RecordRing(int32_t* words_, uint64_t* barriers)
        : words(words_), full(barriers), empty(barriers + kSlots) {}

    // The slot holding the n-th record, and the barrier phase of that use.
    __device__ __forceinline__ static uint32_t slot(uint32_t n) { return n % kSlots; }
    __device__ __forceinline__ static uint32_t phase(uint32_t n) { return (n / kSlots) & 1u; }

    __device__ __forceinline__ void init_barriers() const {
        static_for<0, kSlots>([&](auto s) {
            mbar_init(&full[s.value], 1);                   // the record warp's arrival
            mbar_init(&empty[s.value], Cfg::kMathThreads);  // every math thread has read the record
        });
    }

    // The record warp (one lane per row of each 32): the n-th tile's record, for the tile of m-block
    // `m_block`, into its slot.
    __device__ __forceinline__ void publish(uint32_t m_block, uint32_t n, const int32_t* m_indices, uint32_t m,
                                            uint32_t lane, uint32_t peer_passes) const {
        const uint32_t s = slot(n);
        constexpr uint32_t kChunks = Cfg::kBlockM / 32;
        int32_t id[kChunks];
#pragma unroll
        for (uint32_t j = 0; j < kChunks; ++j)
            id[j] = __ldg(m_indices + min(m_block * Cfg::kBlockM + j * 32 + lane, m - 1));
        mbar_wait(&empty[s], phase(n) ^ 1);
        int32_t* record = words + s * kWords;
#pragma unroll
        for (uint32_t j = 0; j < kChunks; ++j) {
            const uint32_t row = m_block * Cfg::kBlockM + j * 32 + lane;
            const uint32_t none = __ballot_sync(~0u, row < m && uint32_t(id[j]) >= Cfg::kNumGroups);  // -1 wraps high
            if (lane == 0) {
                record[Cfg::kSlabsPerTile + j] = int32_t(none);
                if (j % 2 == 0) record[j / 2] = row < m ? id[j] : -1;
            }
        }
        if constexpr (Cfg::kShareB)
            if (lane == 0) record[kWords - 1] = int32_t(peer_passes);
        __syncwarp();
        if (lane == 0) mbar_arrive(&full[s]);
    }

    // A math thread: the n-th record's slab ids, and the words holding this thread's rows' bits (rows
    // thread_row + unit_row(w) (+8)), then the slot is freed. Every math thread arrives (a release) after its
    // own reads: one arrival per warp after a __syncwarp is as correct, but ptxas drops the warp
    // barrier in converged code, and racecheck then reports the record warp's next write as a race.
    __device__ __forceinline__ void take(uint32_t n, uint32_t thread_row, int32_t (&slab_group)[Cfg::kSlabsPerTile],
                                         uint32_t (&zero_words)[2 * Cfg::kUnitsPerWG], uint32_t& peer_passes) const {
        const uint32_t s = slot(n);
        mbar_wait(&full[s], phase(n));
        const int32_t* record = words + s * kWords;
#pragma unroll
        for (uint32_t i = 0; i < Cfg::kSlabsPerTile; ++i) slab_group[i] = record[i];
#pragma unroll
        for (uint32_t i = 0; i < 2 * Cfg::kUnitsPerWG; ++i)
            zero_words[i] = uint32_t(record[Cfg::kSlabsPerTile + (thread_row + Cfg::unit_row(i / 2) + (i % 2) * 8) / 32]);
        if constexpr (Cfg::kShareB) peer_passes = uint32_t(record[kWords - 1]);
        mbar_arrive(&empty[s]);
    }
};

}  // namespace cg8
