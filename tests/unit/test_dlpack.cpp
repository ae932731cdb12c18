// graph/dlpack: export and import without copies, ownership (each deleter runs exactly once,
// and not at all when an import is refused), dtypes, strides and bad inputs.
#include "graph/dlpack.h"

#include <gtest/gtest.h>

#include <numeric>

using namespace onyx;

namespace {

/// A producer's tensor as another framework would hand it over: owns its bytes, shape and
/// strides, and counts deleter calls in a counter the test keeps.
struct Foreign {
  DLManagedTensor managed{};
  std::vector<char> bytes;
  std::vector<int64_t> shape, strides;
  int* deleted = nullptr;
};

void foreign_deleter(DLManagedTensor* m) {
  auto* f = static_cast<Foreign*>(m->manager_ctx);
  ++*f->deleted;
  delete f;
}

/// A float32 producer tensor of `shape` over a buffer of `buffer_elems` elements (default: the
/// shape's count) holding 0, 1, 2, ... in memory order.
DLManagedTensor* make_foreign(const Shape& shape, int* deleted, std::vector<int64_t> strides = {},
                              size_t buffer_elems = 0, DLDataType dtype = {kDLFloat, 32, 1}) {
  auto* f = new Foreign;
  const size_t n = buffer_elems ? buffer_elems : static_cast<size_t>(shape_numel(shape));
  const size_t elem = dtype.bits / 8;
  f->bytes.resize(std::max<size_t>(n, 1) * elem);
  if (dtype.code == kDLFloat && dtype.bits == 32) {
    auto* p = reinterpret_cast<float*>(f->bytes.data());
    std::iota(p, p + n, 0.f);
  }
  f->shape = shape;
  f->strides = std::move(strides);
  f->deleted = deleted;
  DLTensor& dl = f->managed.dl_tensor;
  dl.data = f->bytes.data();
  dl.device = {kDLCPU, 0};
  dl.ndim = static_cast<int>(shape.size());
  dl.dtype = dtype;
  dl.shape = f->shape.data();
  dl.strides = f->strides.empty() ? nullptr : f->strides.data();
  f->managed.manager_ctx = f;
  f->managed.deleter = foreign_deleter;
  return &f->managed;
}

}  // namespace

TEST(DLPack, ExportSharesMemoryAndKeepsStorageAlive) {
  DLManagedTensor* m = nullptr;
  const void* data = nullptr;
  {
    Tensor t = Tensor::from_vector<float>({2, 3}, {1, 2, 3, 4, 5, 6});
    data = t.raw();
    m = to_dlpack(t);
  }  // the Tensor is gone; the managed tensor still holds its storage
  EXPECT_EQ(m->dl_tensor.data, data);
  EXPECT_EQ(m->dl_tensor.ndim, 2);
  EXPECT_EQ(m->dl_tensor.shape[0], 2);
  EXPECT_EQ(m->dl_tensor.shape[1], 3);
  EXPECT_EQ(m->dl_tensor.strides[0], 3);
  EXPECT_EQ(m->dl_tensor.strides[1], 1);
  EXPECT_EQ(m->dl_tensor.byte_offset, 0u);
  EXPECT_EQ(m->dl_tensor.device.device_type, kDLCPU);
  EXPECT_EQ(m->dl_tensor.dtype.code, kDLFloat);
  EXPECT_EQ(m->dl_tensor.dtype.bits, 32);
  EXPECT_EQ(static_cast<const float*>(m->dl_tensor.data)[5], 6.f);
  m->deleter(m);
}

TEST(DLPack, ExportOfASliceViewPointsAtTheSlice) {
  Tensor t = Tensor::from_vector<int64_t>({4}, {10, 11, 12, 13});
  Tensor tail(DataType::Int64, {2}, t.storage(), 2 * sizeof(int64_t));
  DLManagedTensor* m = to_dlpack(tail);
  EXPECT_EQ(static_cast<int64_t*>(m->dl_tensor.data)[0], 12);
  m->deleter(m);
}

TEST(DLPack, RoundTripIsTheSameMemory) {
  Tensor t = Tensor::from_vector<float>({2, 2}, {1, 2, 3, 4});
  const long uses_before = t.storage().use_count();
  Tensor back = from_dlpack(to_dlpack(t));
  EXPECT_EQ(back.raw(), t.raw());
  EXPECT_EQ(back.shape(), t.shape());
  EXPECT_EQ(back.dtype(), DataType::Float);
  back.data<float>()[3] = 42.f;  // a write through one side is seen by the other
  EXPECT_EQ(t.data<float>()[3], 42.f);
  EXPECT_GT(t.storage().use_count(), uses_before);
  back = Tensor();  // the import's storage runs the export's deleter, which drops its reference
  EXPECT_EQ(t.storage().use_count(), uses_before);
}

TEST(DLPack, ImportRunsTheProducersDeleterExactlyOnce) {
  int deleted = 0;
  DLManagedTensor* m = make_foreign({2, 3}, &deleted);
  const void* data = m->dl_tensor.data;
  {
    Tensor t = from_dlpack(m);
    EXPECT_EQ(t.raw(), data);
    EXPECT_EQ(t.data<float>()[4], 4.f);
    Tensor view = t.reshape({3, 2});  // shares the storage: the deleter waits for both
    t = Tensor();
    EXPECT_EQ(deleted, 0);
    EXPECT_EQ(view.data<float>()[5], 5.f);
  }
  EXPECT_EQ(deleted, 1);
}

TEST(DLPack, ImportHonoursByteOffset) {
  int deleted = 0;
  DLManagedTensor* m = make_foreign({4}, &deleted);
  m->dl_tensor.byte_offset = 2 * sizeof(float);
  m->dl_tensor.shape[0] = 2;
  Tensor t = from_dlpack(m);
  EXPECT_EQ(t.data<float>()[0], 2.f);
  EXPECT_EQ(t.data<float>()[1], 3.f);
}

TEST(DLPack, EveryDtypeRoundTrips) {
  for (DataType dt : {DataType::Float16, DataType::BFloat16, DataType::Float, DataType::Double,
                      DataType::Int8, DataType::Int16, DataType::Int32, DataType::Int64,
                      DataType::UInt8, DataType::UInt16, DataType::UInt32, DataType::UInt64,
                      DataType::Bool}) {
    SCOPED_TRACE(dtype_name(dt));
    const DLDataType dl = to_dlpack_dtype(dt);
    EXPECT_EQ(dl.bits, dtype_size(dt) * 8);
    EXPECT_EQ(dl.lanes, 1);
    EXPECT_EQ(from_dlpack_dtype(dl), dt);
    Tensor t = Tensor::zeros(dt, {3});
    Tensor back = from_dlpack(to_dlpack(t));
    EXPECT_EQ(back.dtype(), dt);
    EXPECT_EQ(back.raw(), t.raw());
  }
  EXPECT_EQ(to_dlpack_dtype(DataType::Bool).code, kDLBoolCode);
  EXPECT_EQ(to_dlpack_dtype(DataType::BFloat16).code, kDLBfloat);
}

TEST(DLPack, UnknownDtypesAreErrors) {
  EXPECT_THROW(to_dlpack_dtype(DataType::String), Error);
  EXPECT_THROW(to_dlpack_dtype(DataType::Float8E4M3FN), Error);
  EXPECT_THROW(from_dlpack_dtype({kDLFloat, 8, 1}), Error);
  EXPECT_THROW(from_dlpack_dtype({kDLComplex, 64, 1}), Error);
  try {
    from_dlpack_dtype({kDLFloat, 32, 4});
    FAIL() << "vector lanes accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("lanes 4"), std::string::npos) << e.what();
  }
  Tensor s = Tensor::empty(DataType::String, {2});
  EXPECT_THROW(to_dlpack(s), Error);
  EXPECT_THROW(to_dlpack(Tensor()), Error);
}

TEST(DLPack, StridedImportIsRefusedWithShapeAndStrides) {
  int deleted = 0;
  DLManagedTensor* m = make_foreign({2, 3}, &deleted, {1, 2});  // a transposed [3, 2]
  try {
    from_dlpack(m);
    FAIL() << "strided tensor accepted";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("shape [2, 3]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("strides [1, 2]"), std::string::npos) << msg;
    EXPECT_NE(msg.find("copy_if_strided"), std::string::npos) << msg;
  }
  EXPECT_EQ(deleted, 0);  // refused: still the caller's
  m->deleter(m);
  EXPECT_EQ(deleted, 1);
}

TEST(DLPack, StridedImportCopiesWhenAskedAndReleasesAtOnce) {
  int deleted = 0;
  // Memory 0..5 read as a [3, 2] with strides [1, 3]: the transpose of the [2, 3] row-major.
  DLManagedTensor* m = make_foreign({3, 2}, &deleted, {1, 3});
  const void* data = m->dl_tensor.data;
  Tensor t = from_dlpack(m, {.copy_if_strided = true});
  EXPECT_EQ(deleted, 1);
  EXPECT_NE(t.raw(), data);
  EXPECT_EQ(t.shape(), (Shape{3, 2}));
  EXPECT_EQ(t.to_double_vector(), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(DLPack, StridedCopyOfABroadcastAndOfA3dSlice) {
  int deleted = 0;
  // Stride 0: one row of 3 repeated twice (torch's expand).
  Tensor b = from_dlpack(make_foreign({2, 3}, &deleted, {0, 1}), {.copy_if_strided = true});
  EXPECT_EQ(b.to_double_vector(), (std::vector<double>{0, 1, 2, 0, 1, 2}));
  // Every other element of the last axis of a [2, 2, 4] block: shape [2, 2, 2].
  Tensor s = from_dlpack(make_foreign({2, 2, 2}, &deleted, {8, 4, 2}, 16), {.copy_if_strided = true});
  EXPECT_EQ(s.to_double_vector(), (std::vector<double>{0, 2, 4, 6, 8, 10, 12, 14}));
  EXPECT_EQ(deleted, 2);
}

TEST(DLPack, SizeOneAxesMayHaveAnyStride) {
  int deleted = 0;
  Tensor t = from_dlpack(make_foreign({1, 3}, &deleted, {99, 1}));
  EXPECT_EQ(t.shape(), (Shape{1, 3}));
  t = from_dlpack(make_foreign({0, 3}, &deleted, {7, 7}));  // no elements: nothing misplaced
  EXPECT_EQ(t.numel(), 0);
}

TEST(DLPack, BadInputsAreRefusedAndLeftToTheCaller) {
  EXPECT_THROW(from_dlpack(nullptr), Error);
  int deleted = 0;
  DLManagedTensor* m = make_foreign({2}, &deleted);
  m->dl_tensor.device = {kDLCUDA, 0};
  try {
    from_dlpack(m);
    FAIL() << "CUDA memory accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("device_type 2"), std::string::npos) << e.what();
  }
  m->dl_tensor.device = {kDLCPU, 0};
  m->dl_tensor.dtype = {kDLComplex, 64, 1};
  EXPECT_THROW(from_dlpack(m), Error);
  m->dl_tensor.dtype = {kDLFloat, 32, 1};
  m->dl_tensor.shape[0] = -1;
  EXPECT_THROW(from_dlpack(m), Error);
  EXPECT_EQ(deleted, 0);
  m->dl_tensor.shape[0] = 2;
  from_dlpack(m);  // the same tensor, fixed, is accepted (and released with the result)
  EXPECT_EQ(deleted, 1);
}
