// The wire dtypes of ComputeLayer (rpc/wire_tensor.h, expert_node/
// layer_compute.h): bfloat16 encoding against bit patterns worked out by hand,
// and the node's handling of bf16 requests and replies, unknown dtypes and
// sizes that do not match.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "colibri/v1/expert.pb.h"
#include "common/thread_pool.h"
#include "expert_node/layer_compute.h"
#include "gtest/gtest.h"
#include "rpc/wire_tensor.h"

namespace colibri {
namespace {

namespace ex = expert_node;

float FromBits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t EncodeOne(float f) {
  char bytes[2];
  rpc::EncodeFloats(&f, 1, v1::DTYPE_BF16, bytes);
  uint16_t h;
  std::memcpy(&h, bytes, 2);
  return h;
}

TEST(WireTensorTest, Bf16RoundsToNearestEven) {
  EXPECT_EQ(EncodeOne(1.0f), 0x3F80);
  EXPECT_EQ(EncodeOne(-2.0f), 0xC000);
  // Halfway between 0x3F80 and 0x3F81: to the even one.
  EXPECT_EQ(EncodeOne(FromBits(0x3F808000u)), 0x3F80);
  // Halfway between 0x3F81 and 0x3F82: to the even one.
  EXPECT_EQ(EncodeOne(FromBits(0x3F818000u)), 0x3F82);
  // Just above halfway: up.
  EXPECT_EQ(EncodeOne(FromBits(0x3F808001u)), 0x3F81);
  // Just below halfway: down.
  EXPECT_EQ(EncodeOne(FromBits(0x3F807FFFu)), 0x3F80);
  // The largest float rounds to infinity; infinity and NaN stay what they are.
  EXPECT_EQ(EncodeOne(FromBits(0x7F7FFFFFu)), 0x7F80);
  EXPECT_EQ(EncodeOne(std::numeric_limits<float>::infinity()), 0x7F80);
  const uint16_t nan = EncodeOne(std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0);
}

TEST(WireTensorTest, DecodesBf16AndCopiesF32) {
  const uint16_t h[3] = {0x3FC0, 0xC000, 0x0000};  // 1.5, -2, 0
  char bytes[6];
  std::memcpy(bytes, h, 6);
  float out[3];
  rpc::DecodeFloats(bytes, 3, v1::DTYPE_BF16, out);
  EXPECT_EQ(out[0], 1.5f);
  EXPECT_EQ(out[1], -2.0f);
  EXPECT_EQ(out[2], 0.0f);
  const float in[2] = {FromBits(0x3F800001u), -0.1f};
  char raw[8];
  rpc::EncodeFloats(in, 2, v1::DTYPE_F32, raw);
  EXPECT_EQ(std::memcmp(raw, in, 8), 0);
}

TEST(WireTensorTest, ParsesTheFlagValues) {
  EXPECT_EQ(*rpc::ParseWireDType("f32"), v1::DTYPE_F32);
  EXPECT_EQ(*rpc::ParseWireDType("bf16"), v1::DTYPE_BF16);
  for (const char* bad : {"f16", "BF16", "", "fp32"}) {
    absl::StatusOr<v1::DType> d = rpc::ParseWireDType(bad);
    EXPECT_EQ(d.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
}

constexpr int64_t kEmbd = 8;
constexpr int64_t kFf = 4;

// One F32 expert for every key: small values that are not bf16-exact.
struct Expert {
  Expert() : gate(kFf * kEmbd), up(kFf * kEmbd), down(kEmbd * kFf) {
    for (size_t i = 0; i < gate.size(); ++i) gate[i] = 0.013f * static_cast<float>(i % 7) - 0.03f;
    for (size_t i = 0; i < up.size(); ++i) up[i] = 0.021f * static_cast<float>(i % 5) - 0.04f;
    for (size_t i = 0; i < down.size(); ++i) down[i] = 0.017f * static_cast<float>(i % 3) + 0.1f;
    weights.gate = Matrix(gate, kFf, kEmbd);
    weights.up = Matrix(up, kFf, kEmbd);
    weights.down = Matrix(down, kEmbd, kFf);
  }
  static ops::WeightMatrix Matrix(const std::vector<float>& v, int64_t rows, int64_t cols) {
    ops::WeightMatrix m;
    m.type = ops::TensorType::kF32;
    m.data = reinterpret_cast<const uint8_t*>(v.data());
    m.rows = rows;
    m.cols = cols;
    m.row_bytes = static_cast<uint64_t>(cols) * sizeof(float);
    return m;
  }
  std::vector<float> gate, up, down;
  moe::ExpertWeights weights;
};

class LayerComputeWireTest : public ::testing::Test {
 protected:
  LayerComputeWireTest() : pool_(1) {
    model_.n_layer = 2;
    model_.n_expert = 4;
    model_.n_embd = kEmbd;
  }

  // Two tokens whose values are exact in bf16, three routes.
  static v1::ComputeLayerRequest Request(v1::DType dtype) {
    v1::ComputeLayerRequest r;
    r.set_model_fingerprint("m");
    r.set_layer(1);
    std::vector<float> hidden(2 * kEmbd);
    for (int64_t i = 0; i < 2 * kEmbd; ++i) hidden[i] = 0.25f * static_cast<float>(i % 5) - 0.5f;
    v1::Tensor* h = r.mutable_hidden();
    h->set_dtype(dtype);
    h->add_shape(2);
    h->add_shape(kEmbd);
    h->mutable_data()->resize(hidden.size() * rpc::WireElementBytes(dtype));
    rpc::EncodeFloats(hidden.data(), static_cast<int64_t>(hidden.size()), dtype,
                      h->mutable_data()->data());
    for (auto [token, expert] : {std::pair{0, 1}, {1, 2}, {0, 3}}) {
      v1::Route* route = r.add_routes();
      route->set_token(token);
      route->set_expert(expert);
      route->set_weight(0.5f);
    }
    return r;
  }

  absl::StatusOr<v1::Tensor> Compute(const v1::ComputeLayerRequest& request) {
    absl::StatusOr<ex::LayerWork> work = ex::ParseLayerRequest(request, model_);
    if (!work.ok()) return work.status();
    auto lookup = [this](int, int) -> absl::StatusOr<moe::ExpertWeights> {
      return expert_.weights;
    };
    std::vector<float> out;
    if (absl::Status s = ex::ComputeLayerWork(*work, lookup, &pool_, &out); !s.ok()) return s;
    v1::Tensor t;
    ex::EncodeLayerOutputs(*work, out, &t);
    return t;
  }

  ex::ModelInfo model_;
  Expert expert_;
  ThreadPool pool_;
};

std::vector<float> AsFloats(const std::string& data) {
  std::vector<float> v(data.size() / 4);
  std::memcpy(v.data(), data.data(), v.size() * 4);
  return v;
}

TEST_F(LayerComputeWireTest, Bf16HiddenRowsGiveTheF32Result) {
  absl::StatusOr<v1::Tensor> f32 = Compute(Request(v1::DTYPE_F32));
  ASSERT_TRUE(f32.ok()) << f32.status();
  absl::StatusOr<v1::Tensor> bf16_in = Compute(Request(v1::DTYPE_BF16));
  ASSERT_TRUE(bf16_in.ok()) << bf16_in.status();
  EXPECT_EQ(f32->dtype(), v1::DTYPE_F32);
  EXPECT_EQ(bf16_in->dtype(), v1::DTYPE_F32);  // reply_dtype unset: f32
  ASSERT_EQ(f32->data().size(), 3u * kEmbd * 4);
  // The hidden values are exact in bf16, so the rows are the same bits.
  EXPECT_EQ(f32->data(), bf16_in->data());
}

TEST_F(LayerComputeWireTest, Bf16RepliesAreTheF32RowsRounded) {
  absl::StatusOr<v1::Tensor> f32 = Compute(Request(v1::DTYPE_F32));
  ASSERT_TRUE(f32.ok()) << f32.status();
  v1::ComputeLayerRequest request = Request(v1::DTYPE_BF16);
  request.set_reply_dtype(v1::DTYPE_BF16);
  absl::StatusOr<v1::Tensor> bf16 = Compute(request);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  EXPECT_EQ(bf16->dtype(), v1::DTYPE_BF16);
  ASSERT_EQ(bf16->shape_size(), 2);
  EXPECT_EQ(bf16->shape(0), 3);
  EXPECT_EQ(bf16->shape(1), kEmbd);
  ASSERT_EQ(bf16->data().size(), 3u * kEmbd * 2);
  const std::vector<float> rows = AsFloats(f32->data());
  int not_exact = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    uint32_t u;
    std::memcpy(&u, &rows[i], 4);
    // Round to nearest even on the top 16 bits, written out here.
    const uint32_t lower = u & 0xFFFFu;
    uint32_t upper = u >> 16;
    if (lower > 0x8000u || (lower == 0x8000u && (upper & 1u))) ++upper;
    not_exact += lower != 0;
    uint16_t got;
    std::memcpy(&got, bf16->data().data() + 2 * i, 2);
    EXPECT_EQ(got, static_cast<uint16_t>(upper)) << "element " << i;
  }
  EXPECT_GT(not_exact, 0);  // the rounding was exercised
}

TEST_F(LayerComputeWireTest, ReducedBf16RepliesHaveOneRowPerToken) {
  v1::ComputeLayerRequest request = Request(v1::DTYPE_F32);
  request.set_reduce_per_token(true);
  request.set_reply_dtype(v1::DTYPE_BF16);
  absl::StatusOr<v1::Tensor> out = Compute(request);
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(out->shape(0), 2);
  EXPECT_EQ(out->data().size(), 2u * kEmbd * 2);
}

TEST_F(LayerComputeWireTest, UnknownDtypesAndWrongSizesAreInvalidArgument) {
  struct Case {
    const char* name;
    v1::ComputeLayerRequest request;
    const char* says;
  };
  std::vector<Case> cases;
  for (v1::DType d : {v1::DTYPE_UNSPECIFIED, v1::DTYPE_F16, static_cast<v1::DType>(77)}) {
    v1::ComputeLayerRequest r = Request(v1::DTYPE_F32);
    r.mutable_hidden()->set_dtype(d);
    cases.push_back({"hidden dtype", r, "dtype"});
  }
  for (v1::DType d : {v1::DTYPE_F16, static_cast<v1::DType>(-3), static_cast<v1::DType>(9)}) {
    v1::ComputeLayerRequest r = Request(v1::DTYPE_F32);
    r.set_reply_dtype(d);
    cases.push_back({"reply dtype", r, "reply_dtype"});
  }
  {
    // bf16 announced, f32 bytes sent.
    v1::ComputeLayerRequest r = Request(v1::DTYPE_F32);
    r.mutable_hidden()->set_dtype(v1::DTYPE_BF16);
    cases.push_back({"bf16 with f32 bytes", r, "bytes"});
  }
  {
    v1::ComputeLayerRequest r = Request(v1::DTYPE_BF16);
    r.mutable_hidden()->mutable_data()->pop_back();
    cases.push_back({"one byte short", r, "bytes"});
  }
  {
    v1::ComputeLayerRequest r = Request(v1::DTYPE_BF16);
    r.mutable_hidden()->set_shape(0, int64_t{1} << 40);
    cases.push_back({"huge shape", r, "shape"});
  }
  {
    v1::ComputeLayerRequest r = Request(v1::DTYPE_BF16);
    r.mutable_hidden()->set_shape(1, kEmbd / 2);
    r.mutable_hidden()->set_shape(0, 4);
    cases.push_back({"wrong width, same bytes", r, "shape"});
  }
  for (const Case& c : cases) {
    absl::StatusOr<v1::Tensor> out = Compute(c.request);
    EXPECT_EQ(out.status().code(), absl::StatusCode::kInvalidArgument) << c.name;
    EXPECT_NE(std::string(out.status().message()).find(c.says), std::string::npos)
        << c.name << ": " << out.status();
  }
}

}  // namespace
}  // namespace colibri
