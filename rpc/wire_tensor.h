// Activations on the coordinator <-> expert node wire (colibri.v1.Tensor):
// the element types a ComputeLayer request's hidden rows and its reply's
// output rows may use, and their encoding.
//
// DTYPE_F32 is little-endian IEEE float32, copied bit for bit (the default:
// remote results stay bitwise equal to local ones). DTYPE_BF16 keeps the top
// 16 bits of each float32 after rounding to nearest even (NaN stays NaN), half
// the bytes at bfloat16's 8-bit precision. Any other value (DTYPE_F16,
// DTYPE_UNSPECIFIED, numbers this version does not know) is refused by whoever
// receives it, with InvalidArgument naming the dtype.
//
// Thread-safety: pure functions.
#ifndef COLIBRI_RPC_WIRE_TENSOR_H_
#define COLIBRI_RPC_WIRE_TENSOR_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "colibri/v1/expert.pb.h"

namespace colibri::rpc {

// Bytes per element of a wire activation dtype: 4 (F32), 2 (BF16); 0 for any
// dtype activations may not use.
int WireElementBytes(v1::DType dtype);

// "f32" / "bf16" for the flags and statistics; "DTYPE_<n>" for others.
std::string WireDTypeName(v1::DType dtype);

// Parses --wire-dtype: "f32" or "bf16". InvalidArgument naming the accepted
// values otherwise.
absl::StatusOr<v1::DType> ParseWireDType(absl::string_view name);

// Encodes n floats as `dtype` into dst (n * WireElementBytes(dtype) bytes).
// dtype must be F32 or BF16 (checked by the caller).
void EncodeFloats(const float* src, int64_t n, v1::DType dtype, char* dst);
// Decodes n elements of `dtype` (F32 or BF16) from src into floats.
void DecodeFloats(const char* src, int64_t n, v1::DType dtype, float* dst);

// Checks that `tensor` is a [rows, cols] matrix of a wire activation dtype
// whose data holds exactly rows * cols elements; rows < 0 or cols < 0 accept
// any value of that dimension (bounded so that the byte count cannot
// overflow). InvalidArgument naming `what`, the dtype or the sizes otherwise.
absl::Status CheckWireMatrix(const v1::Tensor& tensor, absl::string_view what, int64_t rows,
                             int64_t cols);

}  // namespace colibri::rpc

#endif  // COLIBRI_RPC_WIRE_TENSOR_H_
