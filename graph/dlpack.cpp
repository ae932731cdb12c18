#include "graph/dlpack.h"

#include <cstring>
#include <memory>

namespace onyx {

namespace {

std::string dl_dtype_str(DLDataType d) {
  return fmt::format("(code {}, bits {}, lanes {})", d.code, d.bits, d.lanes);
}

std::string dl_device_str(DLDevice d) {
  return fmt::format("(device_type {}, device_id {})", static_cast<int>(d.device_type), d.device_id);
}

/// What to_dlpack hands out: the DLPack struct plus what its pointers point into. The Tensor
/// copy holds the storage's reference, which is the whole point.
struct ExportedTensor {
  DLManagedTensor managed{};
  Tensor tensor;
  std::vector<int64_t> shape, strides;
};

void delete_exported(DLManagedTensor* self) {
  delete static_cast<ExportedTensor*>(self->manager_ctx);
}

/// Row-major strides, in elements.
std::vector<int64_t> row_major_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

/// True when `strides` address the elements of `shape` in row-major order without gaps.
/// Axes of size 1 may carry any stride (torch and numpy give them arbitrary ones), and an
/// empty tensor has no elements to misplace.
bool is_row_major(const Shape& shape, const int64_t* strides) {
  if (strides == nullptr || shape_numel(shape) == 0) return true;
  int64_t expected = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    if (shape[i] != 1 && strides[i] != expected) return false;
    expected *= shape[i];
  }
  return true;
}

/// Copies the elements of a strided view into `dst` in row-major order.
void copy_strided(const char* src, const Shape& shape, const int64_t* strides, size_t elem,
                  char* dst) {
  const size_t rank = shape.size();
  if (rank == 0) {
    std::memcpy(dst, src, elem);
    return;
  }
  const int64_t inner = shape[rank - 1], inner_stride = strides[rank - 1];
  const int64_t rows = shape_numel(shape) / inner;
  std::vector<int64_t> index(rank, 0);  // odometer over the outer axes
  for (int64_t row = 0; row < rows; ++row) {
    int64_t offset = 0;
    for (size_t a = 0; a + 1 < rank; ++a) offset += index[a] * strides[a];
    const char* p = src + offset * static_cast<int64_t>(elem);
    if (inner_stride == 1) {
      std::memcpy(dst, p, static_cast<size_t>(inner) * elem);
      dst += inner * elem;
    } else {
      for (int64_t j = 0; j < inner; ++j, dst += elem)
        std::memcpy(dst, p + j * inner_stride * static_cast<int64_t>(elem), elem);
    }
    for (size_t a = rank - 1; a-- > 0;) {
      if (++index[a] < shape[a]) break;
      index[a] = 0;
    }
  }
}

}  // namespace

DLDataType to_dlpack_dtype(DataType dtype) {
  auto make = [](uint8_t code, size_t bytes) {
    return DLDataType{code, static_cast<uint8_t>(bytes * 8), 1};
  };
  switch (dtype) {
    case DataType::Float16:
    case DataType::Float:
    case DataType::Double: return make(kDLFloat, dtype_size(dtype));
    case DataType::BFloat16: return make(kDLBfloat, 2);
    case DataType::Int8:
    case DataType::Int16:
    case DataType::Int32:
    case DataType::Int64: return make(kDLInt, dtype_size(dtype));
    case DataType::UInt8:
    case DataType::UInt16:
    case DataType::UInt32:
    case DataType::UInt64: return make(kDLUInt, dtype_size(dtype));
    case DataType::Bool: return make(kDLBoolCode, 1);
    default:
      ONYX_THROW("[dlpack] dtype {} has no DLPack equivalent here (expected float16, bfloat16, "
                 "float, double, int8..int64, uint8..uint64 or bool)",
                 dtype_name(dtype));
  }
}

DataType from_dlpack_dtype(DLDataType d) {
  if (d.lanes == 1) {
    switch (d.code) {
      case kDLFloat:
        if (d.bits == 16) return DataType::Float16;
        if (d.bits == 32) return DataType::Float;
        if (d.bits == 64) return DataType::Double;
        break;
      case kDLBfloat:
        if (d.bits == 16) return DataType::BFloat16;
        break;
      case kDLInt:
        if (d.bits == 8) return DataType::Int8;
        if (d.bits == 16) return DataType::Int16;
        if (d.bits == 32) return DataType::Int32;
        if (d.bits == 64) return DataType::Int64;
        break;
      case kDLUInt:
        if (d.bits == 8) return DataType::UInt8;
        if (d.bits == 16) return DataType::UInt16;
        if (d.bits == 32) return DataType::UInt32;
        if (d.bits == 64) return DataType::UInt64;
        break;
      case kDLBoolCode:
        if (d.bits == 8) return DataType::Bool;
        break;
      default: break;
    }
  }
  ONYX_THROW("[dlpack] unsupported DLPack dtype {}: expected one lane of float 16/32/64, "
             "bfloat 16, int or uint 8/16/32/64, or bool 8",
             dl_dtype_str(d));
}

DLManagedTensor* to_dlpack(const Tensor& t) {
  ONYX_CHECK(t.defined() && t.storage(), "[dlpack] cannot export an empty (undefined) Tensor");
  ONYX_CHECK(t.device().type == DeviceType::CPU,
             "[dlpack] only CPU tensors can be exported for now; this one is on {}",
             t.device().str());
  const DLDataType dtype = to_dlpack_dtype(t.dtype());

  auto holder = std::make_unique<ExportedTensor>();
  holder->tensor = t;
  holder->shape = t.shape();
  holder->strides = row_major_strides(t.shape());
  DLTensor& dl = holder->managed.dl_tensor;
  dl.data = const_cast<void*>(t.raw());  // shared memory: the consumer may write, as we may
  dl.device = DLDevice{kDLCPU, 0};
  dl.ndim = static_cast<int>(t.rank());
  dl.dtype = dtype;
  dl.shape = holder->shape.data();
  dl.strides = holder->strides.data();
  dl.byte_offset = 0;
  holder->managed.manager_ctx = holder.get();
  holder->managed.deleter = delete_exported;
  return &holder.release()->managed;
}

Tensor from_dlpack(DLManagedTensor* managed, const FromDlpackOptions& options) {
  ONYX_CHECK(managed != nullptr, "[dlpack] null DLManagedTensor");
  const DLTensor& dl = managed->dl_tensor;
  ONYX_CHECK(dl.device.device_type == kDLCPU,
             "[dlpack] only CPU memory can be viewed for now (expected device_type {} = kDLCPU), "
             "found {}",
             static_cast<int>(kDLCPU), dl_device_str(dl.device));
  const DataType dtype = from_dlpack_dtype(dl.dtype);
  ONYX_CHECK(dl.ndim >= 0, "[dlpack] negative ndim {}", dl.ndim);
  ONYX_CHECK(dl.ndim == 0 || dl.shape != nullptr, "[dlpack] ndim {} but no shape array", dl.ndim);
  Shape shape(dl.shape, dl.shape + dl.ndim);
  for (int64_t d : shape)
    ONYX_CHECK(d >= 0, "[dlpack] negative dimension in shape {}", shape_str(shape));
  const size_t nbytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  char* data = static_cast<char*>(dl.data) + dl.byte_offset;
  ONYX_CHECK(data != nullptr || nbytes == 0, "[dlpack] null data pointer for shape {}",
             shape_str(shape));

  if (!is_row_major(shape, dl.strides)) {
    std::vector<int64_t> strides(dl.strides, dl.strides + dl.ndim);
    ONYX_CHECK(options.copy_if_strided,
               "[dlpack] tensor of shape {} has strides {} (in elements); onyx needs row-major "
               "contiguous strides {} (make it contiguous first, or ask for a copy: "
               "copy_if_strided)",
               shape_str(shape), shape_str(strides), shape_str(row_major_strides(shape)));
    Tensor copy = Tensor::empty(dtype, shape);
    copy_strided(data, shape, dl.strides, dtype_size(dtype), static_cast<char*>(copy.raw()));
    if (managed->deleter) managed->deleter(managed);
    return copy;
  }

  auto storage = std::make_shared<Storage>(data, nbytes, Device{}, [managed](void*) {
    if (managed->deleter) managed->deleter(managed);
  });
  return Tensor(dtype, std::move(shape), std::move(storage));
}

}  // namespace onyx
