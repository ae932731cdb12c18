// Zero-copy tensors between libtorch and onyx (interop/torch_tensor.h): the same memory both
// ways for every shared dtype, writes seen across, lifetimes, offsets, the documented
// non-contiguous behaviour and the errors.
#include <ATen/ops/arange.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <ATen/ops/scalar_tensor.h>
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "graph/error.h"
#include "interop/torch_tensor.h"

namespace onyx::torch {
namespace {

struct DtypeCase {
  DataType onyx;
  c10::ScalarType torch;
  /// torch has arithmetic kernels (fill_, item) for it; the others are checked bytewise.
  bool arithmetic;
};

void PrintTo(const DtypeCase& c, std::ostream* os) { *os << dtype_name(c.onyx); }

const std::vector<DtypeCase> kDtypes = {
    {DataType::Float, at::kFloat, true},         {DataType::Double, at::kDouble, true},
    {DataType::Float16, at::kHalf, true},        {DataType::BFloat16, at::kBFloat16, true},
    {DataType::Int8, at::kChar, true},           {DataType::Int16, at::kShort, true},
    {DataType::Int32, at::kInt, true},           {DataType::Int64, at::kLong, true},
    {DataType::UInt8, at::kByte, true},          {DataType::Bool, at::kBool, true},
    {DataType::UInt16, at::kUInt16, false},      {DataType::UInt32, at::kUInt32, false},
    {DataType::UInt64, at::kUInt64, false},      {DataType::Complex64, at::kComplexFloat, false},
    {DataType::Complex128, at::kComplexDouble, false},
    {DataType::Float8E4M3FN, at::kFloat8_e4m3fn, false},
    {DataType::Float8E4M3FNUZ, at::kFloat8_e4m3fnuz, false},
    {DataType::Float8E5M2, at::kFloat8_e5m2, false},
    {DataType::Float8E5M2FNUZ, at::kFloat8_e5m2fnuz, false},
    {DataType::Float8E8M0, at::kFloat8_e8m0fnu, false},
};

/// Sum of a tensor's bytes as torch reads them (a uint8 view and a reduction kernel), so a
/// write through onyx is checked by torch code rather than by comparing pointers.
int64_t torch_byte_sum(const at::Tensor& t) { return t.view(at::kByte).sum().item<int64_t>(); }

/// Fills onyx's bytes with 1, 2, ..., returns their sum.
int64_t write_bytes(Tensor& o) {
  auto* p = static_cast<uint8_t*>(o.raw());
  int64_t sum = 0;
  for (size_t i = 0; i < o.nbytes(); ++i) sum += (p[i] = static_cast<uint8_t>(i % 250 + 1));
  return sum;
}

template <typename E>
std::string message_of(E&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no onyx::Error thrown)";
}

class EveryDtype : public testing::TestWithParam<DtypeCase> {};

TEST_P(EveryDtype, FromTorchViewsTorchMemoryAndWritesAreSeenBothWays) {
  const DtypeCase& c = GetParam();
  EXPECT_EQ(from_scalar_type(c.torch), c.onyx);
  EXPECT_EQ(to_scalar_type(c.onyx), c.torch);
  at::Tensor t = at::empty({2, 3}, at::TensorOptions().dtype(c.torch));
  std::memset(t.data_ptr(), 0, t.nbytes());
  Tensor o = from_torch(t);
  EXPECT_EQ(o.raw(), t.data_ptr());
  EXPECT_EQ(o.dtype(), c.onyx);
  EXPECT_EQ(o.shape(), (Shape{2, 3}));
  EXPECT_EQ(o.nbytes(), t.nbytes());
  // onyx writes, torch reads.
  const int64_t sum = write_bytes(o);
  EXPECT_EQ(torch_byte_sum(t), sum);
  if (c.arithmetic) {
    // torch writes, onyx reads (element [1, 2] is the last one).
    t.fill_(0);
    t[1][2] = 1;
    std::vector<double> v = o.to_double_vector();
    EXPECT_EQ(v, (std::vector<double>{0, 0, 0, 0, 0, 1}));
  }
}

TEST_P(EveryDtype, ToTorchViewsOnyxMemoryAndWritesAreSeenBothWays) {
  const DtypeCase& c = GetParam();
  Tensor o = Tensor::zeros(c.onyx, {3, 2});
  at::Tensor t = to_torch(o);
  EXPECT_EQ(t.data_ptr(), o.raw());
  EXPECT_EQ(t.scalar_type(), c.torch);
  EXPECT_EQ(t.sizes().vec(), (std::vector<int64_t>{3, 2}));
  EXPECT_TRUE(t.is_contiguous());
  EXPECT_FALSE(t.requires_grad());
  const int64_t sum = write_bytes(o);
  EXPECT_EQ(torch_byte_sum(t), sum);
  if (c.arithmetic) {
    t.fill_(0);
    t[2][0] = 1;
    EXPECT_EQ(o.to_double_vector(), (std::vector<double>{0, 0, 0, 0, 1, 0}));
  }
}

INSTANTIATE_TEST_SUITE_P(Interop, EveryDtype, testing::ValuesIn(kDtypes),
                         [](const testing::TestParamInfo<DtypeCase>& p) { return dtype_name(p.param.onyx); });

TEST(TorchTensor, EachSideKeepsTheOthersMemoryAlive) {
  // torch -> onyx: the onyx storage holds a reference to the torch tensor.
  at::Tensor t = at::arange(6, at::kFloat);
  const auto before = t.use_count();
  Tensor o = from_torch(t);
  EXPECT_EQ(t.use_count(), before + 1);
  o = Tensor();
  EXPECT_EQ(t.use_count(), before);
  Tensor survivor = from_torch(at::arange(6, at::kFloat).reshape({2, 3}));  // the torch handle dies
  EXPECT_EQ(survivor.to_double_vector(), (std::vector<double>{0, 1, 2, 3, 4, 5}));

  // onyx -> torch: the deleter holds the onyx storage until torch frees the tensor.
  Tensor src = Tensor::from_vector<float>({3}, {1.f, 2.f, 3.f});
  std::weak_ptr<Storage> weak = src.storage();
  at::Tensor view = to_torch(src);
  src = Tensor();
  ASSERT_FALSE(weak.expired());
  EXPECT_EQ(view.sum().item<float>(), 6.f);
  view.reset();
  EXPECT_TRUE(weak.expired());
}

TEST(TorchTensor, OffsetsAreKeptBothWays) {
  // A torch slice starts inside its storage: onyx sees its first element, not the storage's.
  at::Tensor base = at::arange(12, at::kInt).reshape({4, 3});
  at::Tensor rows = base.narrow(0, 1, 2);
  ASSERT_TRUE(rows.is_contiguous());
  Tensor o = from_torch(rows);
  EXPECT_EQ(o.raw(), rows.data_ptr());
  EXPECT_EQ(o.to_int64_vector(), (std::vector<int64_t>{3, 4, 5, 6, 7, 8}));
  // An onyx view at a byte offset into its storage: torch sees the same first element.
  Tensor all = Tensor::from_vector<int32_t>({4, 3}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
  Tensor tail(DataType::Int32, {2, 3}, all.storage(), 6 * sizeof(int32_t));
  at::Tensor t = to_torch(tail);
  EXPECT_EQ(t.data_ptr(), tail.raw());
  EXPECT_EQ(t[0][0].item<int32_t>(), 6);
  EXPECT_EQ(t.sum().item<int64_t>(), 6 + 7 + 8 + 9 + 10 + 11);
}

TEST(TorchTensor, NonContiguousIsAnErrorNamingShapeAndStridesUnlessCopyingIsAllowed) {
  at::Tensor m = at::arange(6, at::kFloat).reshape({2, 3});
  at::Tensor tr = m.t();  // [3, 2] with strides [1, 3]
  const std::string msg = message_of([&] { from_torch(tr); });
  EXPECT_NE(msg.find("[3, 2] with strides [1, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("allow_copy"), std::string::npos) << msg;

  Tensor copy = from_torch(tr, /*allow_copy=*/true);
  EXPECT_NE(copy.raw(), tr.data_ptr());
  EXPECT_EQ(copy.shape(), (Shape{3, 2}));
  EXPECT_EQ(copy.to_double_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));  // row-major of tr
  copy.data<float>()[0] = 100.f;  // a copy: the torch tensor is unchanged
  EXPECT_EQ(m[0][0].item<float>(), 0.f);

  // Broadcast views (stride 0) too; contiguous tensors are never copied, even when allowed.
  at::Tensor row = at::arange(3, at::kFloat);
  at::Tensor expanded = row.expand({4, 3});
  EXPECT_NE(message_of([&] { from_torch(expanded); }).find("[4, 3] with strides [0, 1]"), std::string::npos);
  EXPECT_EQ(from_torch(expanded, true).shape(), (Shape{4, 3}));
  EXPECT_EQ(from_torch(m, true).raw(), m.data_ptr());
}

TEST(TorchTensor, ScalarsAndEmptyTensors) {
  Tensor s = from_torch(at::scalar_tensor(2.5, at::kDouble));
  EXPECT_EQ(s.rank(), 0);
  EXPECT_EQ(s.to_double_vector(), (std::vector<double>{2.5}));
  at::Tensor back = to_torch(Tensor::scalar<int64_t>(7));
  EXPECT_EQ(back.dim(), 0);
  EXPECT_EQ(back.item<int64_t>(), 7);
  Tensor none = from_torch(at::empty({0, 4}, at::kFloat));
  EXPECT_EQ(none.shape(), (Shape{0, 4}));
  EXPECT_EQ(none.numel(), 0);
  EXPECT_EQ(to_torch(Tensor::zeros(DataType::Float, {2, 0})).numel(), 0);
}

TEST(TorchTensor, UnsupportedTypesDevicesAndUndefinedTensorsAreErrors) {
  EXPECT_NE(message_of([] { from_torch(at::Tensor()); }).find("expected a defined tensor"), std::string::npos);
  EXPECT_NE(message_of([] { from_torch(at::empty({2}, at::kComplexHalf)); }).find("ComplexHalf"),
            std::string::npos);
  EXPECT_NE(message_of([] { to_torch(Tensor::zeros(DataType::String, {2})); }).find("onyx dtype string"),
            std::string::npos);
  EXPECT_NE(message_of([] { to_torch(Tensor::zeros(DataType::Int4, {2})); }).find("int4"), std::string::npos);
  EXPECT_NE(message_of([] { to_torch(Tensor()); }).find("expected a tensor with storage"), std::string::npos);
  const std::string meta = message_of([] { from_torch(at::empty({2}, at::TensorOptions().device(at::kMeta))); });
  EXPECT_NE(meta.find("onyx has providers for cpu only"), std::string::npos) << meta;
}

TEST(TorchTensor, CudaMemoryIsRefusedUntilTheCudaProviderIsBuilt) {
  // onyx -> torch: a storage tagged with a CUDA device (never dereferenced here).
  float fake[4];
  auto storage = std::make_shared<Storage>(fake, sizeof(fake), Device{DeviceType::CUDA, 0}, [](void*) {});
  const std::string to = message_of([&] { to_torch(Tensor(DataType::Float, {4}, storage)); });
  EXPECT_NE(to.find("the CUDA provider is not built"), std::string::npos) << to;
  // torch -> onyx: a CUDA tensor over host memory (from_blob with a target device makes no
  // CUDA call; on a machine without CUDA torch may refuse to build it, which skips this part).
  at::Tensor cuda;
  try {
    cuda = at::for_blob(fake, {4}).target_device(at::Device(at::kCUDA, 0)).options(at::kFloat).make_tensor();
  } catch (const c10::Error& e) {
    GTEST_SKIP() << "torch cannot describe a CUDA tensor here: " << e.what_without_backtrace();
  }
  const std::string from = message_of([&] { from_torch(cuda); });
  EXPECT_NE(from.find("cuda:0"), std::string::npos) << from;
  EXPECT_NE(from.find("the CUDA provider is not built"), std::string::npos) << from;
}

}  // namespace
}  // namespace onyx::torch
