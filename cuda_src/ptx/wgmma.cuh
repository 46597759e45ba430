// Warpgroup MMA (wgmma): fences, commit and wait, shared-memory matrix descriptors, and the FP8 MMA
// for every N the kernel may use (wgmma_fp8.cuh, generated).
#pragma once
#include "types.cuh"

namespace cg8 {

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
// Waits until at most kPending committed MMA groups of this warpgroup are still running.
template <uint32_t kPending>
__device__ __forceinline__ void wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}

// Keeps the compiler from moving accesses of an accumulator register across wgmma issue/wait.
__device__ __forceinline__ void fence_operand(float& r) { asm volatile("" : "+f"(r)::"memory"); }

// Shared-memory matrix descriptor for a K-major operand stored with the 128-byte swizzle, as TMA
// writes it: rows of 128 bytes, 8-row (1024-byte) swizzle atoms stacked along M/N.
__device__ __forceinline__ uint64_t smem_desc_sw128(uint32_t byte_addr) {
    uint64_t desc = (byte_addr & 0x3FFFFu) >> 4;  // start address, 16-byte units
    desc |= uint64_t(1) << 16;                     // leading byte offset (unused for swizzled K-major)
    desc |= uint64_t(1024 >> 4) << 32;             // stride byte offset: one 8-row atom
    desc |= uint64_t(1) << 62;                     // layout: 128-byte swizzle
    return desc;
}

// The descriptor of an address `units16` x 16 bytes past the one `desc` describes. Shared-memory
// addresses are below 256 KB, so the 14-bit start-address field cannot carry: a plain add of the low
// word, where forming a descriptor from an address takes a mask, a shift and an or per wgmma.
__device__ __forceinline__ uint64_t smem_desc_add(uint64_t desc, uint32_t units16) {
    return (desc & 0xFFFFFFFF00000000ull) | uint32_t(uint32_t(desc) + units16);
}

}  // namespace cg8

#include "wgmma_fp8.cuh"
