#include "graph/tensor.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "graph/saturate_cast.h"

namespace onyx {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  // Shapes come from models and feeds: a product past int64 is their error, not undefined
  // behaviour (found by tests/fuzz/fuzz_model.cpp).
  for (int64_t d : shape)
    ONYX_CHECK(!__builtin_mul_overflow(n, d, &n), "[shape] the element count of {} overflows int64",
               shape_str(shape));
  return n;
}

int64_t checked_dim_mul(int64_t a, int64_t b, const std::string& who) {
  int64_t r;
  ONYX_CHECK(!__builtin_mul_overflow(a, b, &r), "[{}] an output dimension overflows int64: {} * {}", who, a, b);
  return r;
}

std::optional<size_t> checked_nbytes(DataType dtype, const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, d, &n)) return std::nullopt;
  size_t bytes = 0;
  if (__builtin_mul_overflow(static_cast<size_t>(n), dtype_size(dtype), &bytes)) return std::nullopt;
  return bytes;
}

std::string shape_str(const Shape& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

std::string Device::str() const {
  switch (type) {
    case DeviceType::CPU: return "cpu";
    case DeviceType::CUDA: return fmt::format("cuda:{}", index);
    case DeviceType::Test: return fmt::format("test:{}", index);
  }
  return fmt::format("device{}:{}", static_cast<int>(type), index);
}

namespace {

// Blocks of at least this size are backed by 2 MB transparent huge pages.
constexpr size_t kHugePage = size_t{2} << 20;

/// Whether large blocks ask for transparent huge pages: only with ONYX_HUGE_PAGES=1. Debian's
/// default THP mode is "madvise": without the advice every 4 KB page of a fresh block faults on
/// first touch. With it, GPT-2-small's load + first run took 0.5x the time on our VMs in most
/// runs and 2-4x in the others (the hypervisor takes back freed 8 MB blocks, page_reporting, and
/// a huge page landing in one faults on the host); bench/README.md, "Huge pages". Off by default
/// until a machine without that behaviour has measured it. Read at each large allocation (a
/// getenv beside a multi-megabyte allocation costs nothing), so a process or a test can switch it.
bool huge_pages_wanted() {
  const char* v = std::getenv("ONYX_HUGE_PAGES");
  return v && v[0] == '1' && v[1] == '\0';
}

// Blocks of at least this size are populated when allocated (below it glibc mostly hands out
// recycled heap memory, already mapped).
constexpr size_t kPopulateBytes = size_t{1} << 20;

class HeapAllocator final : public Allocator {
 public:
  explicit HeapAllocator(bool populate) : populate_(populate) {}
  void* allocate(size_t bytes) override {
    // No wrap-around when rounding up (the fuzzers ask for sizes near SIZE_MAX).
    if (bytes > std::numeric_limits<size_t>::max() - kHugePage) throw std::bad_alloc();
    if (bytes >= kHugePage && huge_pages_wanted()) {
      // Whole, aligned huge pages; free() releases them like any other block. The advice is a
      // hint: where the kernel has no THP the block keeps 4 KB pages.
      size_t rounded = (bytes + kHugePage - 1) / kHugePage * kHugePage;
      void* p = std::aligned_alloc(kHugePage, rounded);
      if (!p) throw std::bad_alloc();
      ::madvise(p, rounded, MADV_HUGEPAGE);
      return p;
    }
    size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!p) throw std::bad_alloc();
    if (populate_ && rounded >= kPopulateBytes) populate_pages(p, rounded);
    return p;
  }
  void deallocate(void* ptr, size_t) override { std::free(ptr); }

 private:
  bool populate_;
};

}  // namespace

std::shared_ptr<Allocator> cpu_allocator() {
  static auto heap = std::make_shared<HeapAllocator>(/*populate=*/true);
  return heap;
}

std::shared_ptr<Allocator> cpu_allocator_unpopulated() {
  static auto heap = std::make_shared<HeapAllocator>(/*populate=*/false);
  return heap;
}

void populate_pages(void* data, size_t bytes) {
#ifdef MADV_POPULATE_WRITE
  constexpr int kPopulateWrite = MADV_POPULATE_WRITE;
#else
  constexpr int kPopulateWrite = 23;  // Linux 5.14's value; older libc headers lack the name
#endif
  constexpr uintptr_t kPage = 4096;
  const uintptr_t at = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (at + kPage - 1) & ~(kPage - 1), end = (at + bytes) & ~(kPage - 1);
  // Advice only: EINVAL (an older kernel) or ENOMEM leave the pages to fault at first touch,
  // where a real shortage shows as it always did.
  if (end > begin) ::madvise(reinterpret_cast<void*>(begin), end - begin, kPopulateWrite);
}

Storage::Storage(void* ptr, size_t bytes, Device device, std::function<void(void*)> release)
    : ptr_(ptr), bytes_(bytes), device_(device), release_(std::move(release)) {}

Storage::~Storage() {
  auto* s = static_cast<std::string*>(ptr_);
  for (size_t i = 0; i < strings; ++i) s[i].~basic_string();
  if (release_) release_(ptr_);
}

std::shared_ptr<Storage> Storage::allocate(size_t bytes, const std::shared_ptr<Allocator>& alloc) {
  void* p = alloc->allocate(bytes);
  auto s = std::make_shared<Storage>(p, bytes, alloc->device(),
                                     [alloc, bytes](void* q) { alloc->deallocate(q, bytes); });
  s->owned_ = true;
  return s;
}

Tensor::Tensor(DataType dtype, Shape shape, std::shared_ptr<Storage> storage, size_t offset)
    : dtype_(dtype), shape_(std::move(shape)), storage_(std::move(storage)), offset_(offset) {
  for (int64_t d : shape_) ONYX_CHECK(d >= 0, "[Tensor] negative dimension in shape {}", shape_str(shape_));
  numel_ = shape_numel(shape_);
}

Tensor Tensor::empty(DataType dtype, const Shape& shape, const std::shared_ptr<Allocator>& alloc) {
  ONYX_CHECK(dtype != DataType::Undefined, "[Tensor] cannot allocate an undefined dtype");
  for (int64_t d : shape) ONYX_CHECK(d >= 0, "[Tensor] negative dimension in shape {}", shape_str(shape));
  auto nbytes = checked_nbytes(dtype, shape);
  ONYX_CHECK(nbytes, "[Tensor] {} {} has more bytes than memory can address", dtype_name(dtype),
             shape_str(shape));
  size_t n = static_cast<size_t>(shape_numel(shape)), bytes = *nbytes;
  std::shared_ptr<Storage> storage;
  try {
    storage = Storage::allocate(bytes, alloc ? alloc : cpu_allocator());
  } catch (const std::bad_alloc&) {
    // Named here, where the size is known; callers (the loader, the executor) add whose it is.
    ONYX_THROW("[Tensor] out of memory allocating {} bytes for {} {}", bytes, dtype_name(dtype),
               shape_str(shape));
  }
  if (dtype == DataType::String) {
    auto* s = static_cast<std::string*>(storage->data());
    for (size_t i = 0; i < n; ++i) new (s + i) std::string();
    storage->strings = n;
  }
  return Tensor(dtype, shape, std::move(storage));
}

Tensor Tensor::zeros(DataType dtype, const Shape& shape) {
  Tensor t = empty(dtype, shape);
  if (dtype != DataType::String && t.nbytes() > 0) std::memset(t.raw(), 0, t.nbytes());
  return t;
}

Tensor Tensor::wrap(DataType dtype, const Shape& shape, void* data, Device device) {
  size_t bytes = static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype);
  return Tensor(dtype, shape, std::make_shared<Storage>(data, bytes, device, nullptr));
}

int64_t Tensor::dim(int64_t i) const {
  int64_t r = rank();
  ONYX_CHECK(i >= -r && i < r, "[Tensor] axis {} out of range for rank {}", i, r);
  return shape_[static_cast<size_t>(i < 0 ? i + r : i)];
}

void Tensor::check_type(DataType t) const {
  ONYX_CHECK(t == dtype_, "[Tensor] accessed as {} but holds {}", dtype_name(t), dtype_name(dtype_));
}

Tensor Tensor::reshape(const Shape& shape) const {
  ONYX_CHECK(shape_numel(shape) == numel_, "[Tensor] cannot reshape {} ({} elements) to {}",
             shape_str(shape_), numel_, shape_str(shape));
  Tensor t = *this;
  t.shape_ = shape;
  return t;
}

Tensor Tensor::clone(const std::shared_ptr<Allocator>& alloc) const {
  ONYX_CHECK(device().type == DeviceType::CPU, "[Tensor] clone of a {} tensor needs a provider copy",
             device().str());
  Tensor t = empty(dtype_, shape_, alloc);
  if (dtype_ == DataType::String) {
    const auto* s = data<std::string>();
    auto* d = t.data<std::string>();
    for (int64_t i = 0; i < numel_; ++i) d[i] = s[i];
  } else if (nbytes() > 0) {
    std::memcpy(t.raw(), raw(), nbytes());
  }
  return t;
}

namespace {

// Float data read as integers (indices, sizes, counts from a float tensor) saturates, NaN
// reads as 0 (saturate_cast), instead of an undefined cast (found by the model fuzzer).
template <typename R>
std::vector<R> convert_all(const Tensor& t) {
  std::vector<R> out(static_cast<size_t>(t.numel()));
  auto fill = [&](auto* p) {
    for (size_t i = 0; i < out.size(); ++i) out[i] = saturate_cast<R>(p[i]);
  };
  switch (t.dtype()) {
    case DataType::Float: fill(t.data<float>()); break;
    case DataType::Double: fill(t.data<double>()); break;
    case DataType::Float16: {
      const auto* p = t.data<float16>();
      for (size_t i = 0; i < out.size(); ++i) out[i] = saturate_cast<R>(float(p[i]));
      break;
    }
    case DataType::BFloat16: {
      const auto* p = t.data<bfloat16>();
      for (size_t i = 0; i < out.size(); ++i) out[i] = saturate_cast<R>(float(p[i]));
      break;
    }
    case DataType::Int8: case DataType::Int4: case DataType::Int2: fill(t.data_as<int8_t>()); break;
    case DataType::Int16: fill(t.data<int16_t>()); break;
    case DataType::Int32: fill(t.data<int32_t>()); break;
    case DataType::Int64: fill(t.data<int64_t>()); break;
    case DataType::UInt8: case DataType::UInt4: case DataType::UInt2: fill(t.data_as<uint8_t>()); break;
    case DataType::UInt16: fill(t.data<uint16_t>()); break;
    case DataType::UInt32: fill(t.data<uint32_t>()); break;
    case DataType::UInt64: fill(t.data<uint64_t>()); break;
    case DataType::Bool: fill(t.data<bool>()); break;
    default: ONYX_THROW("[Tensor] cannot read {} values as numbers", dtype_name(t.dtype()));
  }
  return out;
}

}  // namespace

std::vector<int64_t> Tensor::to_int64_vector() const { return convert_all<int64_t>(*this); }
std::vector<double> Tensor::to_double_vector() const { return convert_all<double>(*this); }

std::string Tensor::str(size_t max_elems) const {
  std::string out = fmt::format("{}{}", dtype_name(dtype_), shape_str(shape_));
  if (!storage_ || device().type != DeviceType::CPU) return out;
  size_t n = std::min<size_t>(max_elems, static_cast<size_t>(numel_));
  if (dtype_ == DataType::String) {
    std::vector<std::string> v(data<std::string>(), data<std::string>() + n);
    return fmt::format("{} {}", out, v);
  }
  if (dtype_ == DataType::Complex64 || dtype_ == DataType::Complex128 || is_float8(dtype_))
    return out;
  auto v = to_double_vector();
  v.resize(n);
  return fmt::format("{} [{}{}]", out, fmt::join(v, ", "), n < static_cast<size_t>(numel_) ? ", ..." : "");
}

}  // namespace onyx
