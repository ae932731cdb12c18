// Tensor: dtype + shape + shared storage + byte offset. Contiguous, row-major.
// Reshape and slicing along the first axis are cheap views of the same storage.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graph/dtype.h"
#include "graph/error.h"

namespace onyx {

using Shape = std::vector<int64_t>;

/// Number of elements of a shape (1 for a scalar); onyx::Error when it overflows int64.
int64_t shape_numel(const Shape& shape);
/// a * b for sizes computed from a model's data (a dim times a repeat count, a scale);
/// onyx::Error "[`who`] ... overflows int64" instead of undefined behaviour.
int64_t checked_dim_mul(int64_t a, int64_t b, const std::string& who);
/// Bytes of a dense `dtype` tensor of `shape` (non-negative dims), or nullopt where the
/// element count overflows int64 or the byte count size_t: sizes from a file are checked
/// with it before anything is allocated.
std::optional<size_t> checked_nbytes(DataType dtype, const Shape& shape);
/// "[2, 3, 4]"
std::string shape_str(const Shape& shape);

/// Test: host memory that a test provider treats as a device of its own (placement tests:
/// a kernel handed a host pointer where it wants device memory fails loudly).
enum class DeviceType : int { CPU = 0, CUDA = 1, Test = 2 };

/// Where a tensor's bytes live. graph/ only carries the tag; providers interpret it.
struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;
  bool operator==(const Device&) const = default;
  std::string str() const;
};

/// Hands out device memory. Implementations must be thread-safe.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual Device device() const { return {}; }
};

/// The process-wide CPU allocator (64-byte aligned heap memory, no caching). Blocks of 1 MB
/// and more come with their pages mapped (populate_pages): they are allocated to be written.
std::shared_ptr<Allocator> cpu_allocator();
/// The same heap, pages left to fault at first touch: for a caller that fills a block from
/// several threads, each populating its own part first (the loader's weight copies).
std::shared_ptr<Allocator> cpu_allocator_unpopulated();

/// Maps the whole 4 KB pages inside [data, data + bytes) writable now, in one call
/// (MADV_POPULATE_WRITE): on our VMs a first-touch fault costs ~2 us a page, a populated page
/// ~0.8. A no-op on kernels without the advice (before Linux 5.14), where pages fault as before.
void populate_pages(void* data, size_t bytes);

/// A block of memory and how to give it back. Strings are constructed in place.
class Storage {
 public:
  Storage(void* ptr, size_t bytes, Device device, std::function<void(void*)> release);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  /// Allocates `bytes` from `alloc`, returned to it when the storage dies.
  static std::shared_ptr<Storage> allocate(size_t bytes, const std::shared_ptr<Allocator>& alloc);

  void* data() const { return ptr_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  /// True for memory onyx allocated (Storage::allocate); false for memory it was lent (a
  /// torch or DLPack tensor, a caller's buffer), which onyx never writes unasked.
  bool owned() const { return owned_; }
  /// Number of std::string objects constructed in place (strings tensors only).
  size_t strings = 0;

 private:
  void* ptr_;
  size_t bytes_;
  Device device_;
  std::function<void(void*)> release_;
  bool owned_ = false;
};

class Tensor {
 public:
  Tensor() = default;
  Tensor(DataType dtype, Shape shape, std::shared_ptr<Storage> storage, size_t offset = 0);

  /// Uninitialised tensor (strings default-constructed) from `alloc` or the CPU heap.
  static Tensor empty(DataType dtype, const Shape& shape,
                      const std::shared_ptr<Allocator>& alloc = nullptr);
  /// Zero-filled tensor (empty strings for string tensors).
  static Tensor zeros(DataType dtype, const Shape& shape);
  /// Tensor viewing caller-owned memory; the caller keeps it alive (zero copy).
  static Tensor wrap(DataType dtype, const Shape& shape, void* data, Device device = {});

  template <typename T>
  static Tensor from_vector(const Shape& shape, const std::vector<T>& values);
  template <typename T>
  static Tensor scalar(T value) {
    return from_vector<T>({}, std::vector<T>{value});
  }

  bool defined() const { return storage_ != nullptr || dtype_ != DataType::Undefined; }
  DataType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  int64_t rank() const { return static_cast<int64_t>(shape_.size()); }
  /// Size of axis `i`; negative counts from the end.
  int64_t dim(int64_t i) const;
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }
  Device device() const { return storage_ ? storage_->device() : Device{}; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }
  size_t offset() const { return offset_; }

  void* raw() { return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr; }
  const void* raw() const {
    return storage_ ? static_cast<const char*>(storage_->data()) + offset_ : nullptr;
  }
  /// Typed access; throws when T does not match the dtype.
  template <typename T>
  T* data() {
    check_type(dtype_of<T>());
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data() const {
    check_type(dtype_of<T>());
    return static_cast<const T*>(raw());
  }
  /// Typed access without the dtype check (e.g. uint8_t over float8 bytes).
  template <typename T>
  T* data_as() {
    return static_cast<T*>(raw());
  }
  template <typename T>
  const T* data_as() const {
    return static_cast<const T*>(raw());
  }

  /// View with another shape of the same element count.
  Tensor reshape(const Shape& shape) const;
  /// Deep copy into CPU memory from `alloc` (or the heap).
  Tensor clone(const std::shared_ptr<Allocator>& alloc = nullptr) const;
  /// Elements converted to int64 (integer, bool and float tensors); for shape-like inputs.
  std::vector<int64_t> to_int64_vector() const;
  /// Elements converted to double (numeric tensors).
  std::vector<double> to_double_vector() const;
  /// Short printable form: dtype, shape and up to `max_elems` values.
  std::string str(size_t max_elems = 8) const;

 private:
  void check_type(DataType t) const;

  DataType dtype_ = DataType::Undefined;
  Shape shape_;
  int64_t numel_ = 0;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
};

template <typename T>
Tensor Tensor::from_vector(const Shape& shape, const std::vector<T>& values) {
  Tensor t = empty(dtype_of<T>(), shape);
  ONYX_CHECK(static_cast<int64_t>(values.size()) == t.numel(),
             "[Tensor] {} values given for shape {}", values.size(), shape_str(shape));
  T* out = t.data<T>();
  for (size_t i = 0; i < values.size(); ++i) out[i] = values[i];
  return t;
}

/// A runtime value: a tensor, a sequence of tensors, or an empty optional.
struct Datum {
  enum class Kind { None, Tensor, Sequence };
  Kind kind = Kind::None;
  Tensor tensor;
  std::vector<Tensor> sequence;
  /// Element type of an empty sequence or none-optional, when known.
  DataType elem_type = DataType::Undefined;

  Datum() = default;
  Datum(Tensor t) : kind(Kind::Tensor), tensor(std::move(t)) {}  // NOLINT
  static Datum of_sequence(std::vector<Tensor> seq, DataType elem = DataType::Undefined) {
    Datum d;
    d.kind = Kind::Sequence;
    d.sequence = std::move(seq);
    d.elem_type = elem;
    return d;
  }
  bool is_tensor() const { return kind == Kind::Tensor; }
  bool is_sequence() const { return kind == Kind::Sequence; }
  bool is_none() const { return kind == Kind::None; }
};

}  // namespace onyx
