// Lookup tables of the grid-based i-quants (IQ1_S/IQ1_M, IQ2_*, IQ3_*), as
// GGML defines them (ggml-common.h): each entry packs the magnitudes of 8 (or,
// for the IQ3 grids, 4) consecutive weights, one byte per weight, element j in
// byte j (bits 8j..8j+7). The IQ1 grid holds signed bytes (-1, 0, 1), the
// others unsigned magnitudes. Internal to model/ops; read-only, thread-safe.
#ifndef COLIBRI_MODEL_OPS_IQ_GRIDS_H_
#define COLIBRI_MODEL_OPS_IQ_GRIDS_H_

#include <cstdint>

namespace colibri::ops::internal {

extern const uint64_t kIq2xxsGrid[256];  // magnitudes 8, 25, 43
extern const uint64_t kIq2xsGrid[512];   // magnitudes 8, 25, 43
extern const uint64_t kIq2sGrid[1024];   // magnitudes 8, 25, 43
extern const uint32_t kIq3xxsGrid[256];  // magnitudes 4, 12, ..., 62
extern const uint32_t kIq3sGrid[512];    // magnitudes 1, 3, ..., 15
extern const uint64_t kIq1sGrid[2048];   // signed values -1, 0, 1

// Byte j of a grid entry.
inline int GridByte(uint64_t entry, int j) { return static_cast<int>((entry >> (8 * j)) & 0xFF); }
inline int GridSignedByte(uint64_t entry, int j) {
  return static_cast<int8_t>(static_cast<uint8_t>(entry >> (8 * j)));
}

// The 8 sign bits of a 7-bit sign field: bit 7 makes the number of negative
// weights even (GGML's ksigns_iq2xs). Bit j set: weight j is negative.
inline uint8_t SignsFrom7(uint32_t field) {
  const uint32_t f = field & 127u;
  return static_cast<uint8_t>(f | ((__builtin_popcount(f) & 1u) << 7));
}

}  // namespace colibri::ops::internal

#endif  // COLIBRI_MODEL_OPS_IQ_GRIDS_H_
