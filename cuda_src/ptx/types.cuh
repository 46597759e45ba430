// Fixed-width integers and the driver's tensor-map type, declared here because NVRTC has no system
// headers (cuda.h and <cstdint> are host headers).
#pragma once

namespace cg8 {

typedef unsigned char uint8_t;
typedef unsigned short uint16_t;
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
typedef long long int64_t;

}  // namespace cg8

// The driver's opaque 128-byte tensor map.
typedef struct CUtensorMap_st {
    alignas(64) unsigned long long opaque[16];
} CUtensorMap;
static_assert(sizeof(CUtensorMap) == 128, "CUtensorMap must be 128 bytes");
