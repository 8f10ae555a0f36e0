#include "rpc/wire_tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "model/ops/quantize.h"

namespace colibri::rpc {

int WireElementBytes(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_F32:
      return 4;
    case v1::DTYPE_BF16:
      return 2;
    default:
      return 0;
  }
}

std::string WireDTypeName(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_F32:
      return "f32";
    case v1::DTYPE_BF16:
      return "bf16";
    default:
      return absl::StrCat("DTYPE_", static_cast<int>(dtype));
  }
}

absl::StatusOr<v1::DType> ParseWireDType(absl::string_view name) {
  if (name == "f32") return v1::DTYPE_F32;
  if (name == "bf16") return v1::DTYPE_BF16;
  return absl::InvalidArgumentError(
      absl::StrCat("wire dtype \"", name, "\" is not one of f32, bf16"));
}

void EncodeFloats(const float* src, int64_t n, v1::DType dtype, char* dst) {
  if (dtype == v1::DTYPE_BF16) {
    for (int64_t i = 0; i < n; ++i) {
      const uint16_t h = ops::Fp32ToBf16(src[i]);
      std::memcpy(dst + 2 * i, &h, 2);  // little-endian host
    }
    return;
  }
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void DecodeFloats(const char* src, int64_t n, v1::DType dtype, float* dst) {
  if (dtype == v1::DTYPE_BF16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, src + 2 * i, 2);
      dst[i] = ops::Bf16ToFp32(h);
    }
    return;
  }
  if (n > 0) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

absl::Status CheckWireMatrix(const v1::Tensor& tensor, absl::string_view what, int64_t rows,
                             int64_t cols) {
  const int element = WireElementBytes(tensor.dtype());
  if (element == 0) {
    const std::string name = v1::DType_IsValid(tensor.dtype())
                                 ? v1::DType_Name(tensor.dtype())
                                 : absl::StrCat(static_cast<int>(tensor.dtype()));
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": dtype ", name, " is not a wire activation type (DTYPE_F32, DTYPE_BF16)"));
  }
  if (tensor.shape_size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": shape has ", tensor.shape_size(), " dims, expected 2"));
  }
  const int64_t r = tensor.shape(0);
  const int64_t c = tensor.shape(1);
  // 2^31 elements at most: far above any request cap, and no overflow below.
  constexpr int64_t kMaxElements = int64_t{1} << 31;
  if (r < 0 || c < 0 || (rows >= 0 && r != rows) || (cols >= 0 && c != cols) ||
      (c > 0 && r > kMaxElements / c)) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape [", r, ", ", c, "], expected [",
                                                   rows >= 0 ? absl::StrCat(rows) : "any", ", ",
                                                   cols >= 0 ? absl::StrCat(cols) : "any", "]"));
  }
  const uint64_t expected = static_cast<uint64_t>(r * c) * static_cast<uint64_t>(element);
  if (tensor.data().size() != expected) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": ", tensor.data().size(), " bytes, shape [", r, ", ", c, "] of ",
                     WireDTypeName(tensor.dtype()), " needs ", expected));
  }
  return absl::OkStatus();
}

}  // namespace colibri::rpc
