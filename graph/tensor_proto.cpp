#include "graph/tensor_proto.h"

#include <filesystem>
#include <fstream>

namespace onyx {
namespace fs = std::filesystem;

std::string resolve_external_path(const std::string& base_dir, const std::string& location,
                                  const std::string& what) {
  ONYX_CHECK(!base_dir.empty(),
             "[external data] {} refers to external file '{}' but the model was loaded from "
             "memory without a base folder",
             what, location);
  fs::path loc(location);
  ONYX_CHECK(!loc.is_absolute(),
             "[external data] {}: location '{}' is absolute; it must be relative to the model's "
             "folder",
             what, location);
  for (const auto& part : loc)
    ONYX_CHECK(part != "..", "[external data] {}: location '{}' escapes the model's folder via '..'",
               what, location);
  fs::path base = fs::weakly_canonical(fs::path(base_dir));
  fs::path full = base / loc;
  std::error_code ec;
  ONYX_CHECK(fs::exists(full, ec), "[external data] {}: file '{}' not found (looked for {})", what,
             location, full.string());
  fs::path real = fs::canonical(full, ec);
  ONYX_CHECK(!ec, "[external data] {}: cannot resolve '{}': {}", what, full.string(), ec.message());
  auto rel = real.lexically_relative(base);
  ONYX_CHECK(!rel.empty() && *rel.begin() != "..",
             "[external data] {}: location '{}' resolves to {}, outside the model's folder {}", what,
             location, real.string(), base.string());
  return real.string();
}

namespace {

// Unpacks `n` sub-byte elements (4 or 2 bits each, low bits first) into one byte each,
// sign-extending the signed types.
void unpack_sub_byte(const uint8_t* src, size_t src_bytes, DataType t, uint8_t* dst, size_t n,
                     const std::string& what) {
  int bits = (t == DataType::Int2 || t == DataType::UInt2) ? 2 : 4;
  size_t per = 8 / bits;
  ONYX_CHECK(src_bytes >= (n + per - 1) / per, "[tensor] {}: {} bytes hold fewer than {} {} values",
             what, src_bytes, n, dtype_name(t));
  bool is_signed = t == DataType::Int4 || t == DataType::Int2;
  uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  for (size_t i = 0; i < n; ++i) {
    uint8_t v = (src[i / per] >> ((i % per) * bits)) & mask;
    if (is_signed && (v & (1u << (bits - 1)))) v |= static_cast<uint8_t>(~mask);
    dst[i] = v;
  }
}

std::string pack_sub_byte(const uint8_t* src, size_t n, DataType t) {
  int bits = (t == DataType::Int2 || t == DataType::UInt2) ? 2 : 4;
  size_t per = 8 / bits;
  std::string out((n + per - 1) / per, '\0');
  uint8_t mask = static_cast<uint8_t>((1u << bits) - 1);
  for (size_t i = 0; i < n; ++i)
    out[i / per] = static_cast<char>(static_cast<uint8_t>(out[i / per]) |
                                     ((src[i] & mask) << ((i % per) * bits)));
  return out;
}

// Where a tensor's external bytes lie: checked against the file's size before anything is
// read or allocated.
struct ExternalSpan {
  std::string path, location;
  int64_t offset = 0, length = 0;
};

ExternalSpan external_span(const onnx::TensorProto& p, const std::string& base_dir,
                           const std::string& what) {
  ExternalSpan e;
  int64_t length = -1;
  for (const auto& kv : p.external_data()) {
    if (kv.key() == "location") e.location = kv.value();
    else if (kv.key() == "offset") e.offset = std::stoll(kv.value());
    else if (kv.key() == "length") length = std::stoll(kv.value());
  }
  ONYX_CHECK(!e.location.empty(), "[external data] {} has no 'location' entry", what);
  e.path = resolve_external_path(base_dir, e.location, what);
  std::error_code ec;
  const auto size = static_cast<int64_t>(fs::file_size(e.path, ec));
  ONYX_CHECK(!ec, "[external data] {}: cannot read the size of '{}': {}", what, e.path, ec.message());
  ONYX_CHECK(e.offset >= 0 && e.offset <= size && length >= -1,
             "[external data] {}: offset {} (length {}) is outside '{}', which has {} bytes", what,
             e.offset, length, e.location, size);
  e.length = length < 0 ? size - e.offset : length;
  // Compared as length <= size - offset: offset + length may overflow.
  ONYX_CHECK(e.length <= size - e.offset,
             "[external data] {}: wants {} bytes from offset {} of '{}', which has {} bytes", what,
             e.length, e.offset, e.location, size);
  return e;
}

void read_span(const ExternalSpan& e, void* dst, const std::string& what) {
  std::ifstream f(e.path, std::ios::binary);
  ONYX_CHECK(f.good(), "[external data] {}: cannot open '{}'", what, e.path);
  f.seekg(e.offset);
  f.read(static_cast<char*>(dst), e.length);
  ONYX_CHECK(f.gcount() == e.length, "[external data] {}: read {} of {} bytes from '{}'", what,
             f.gcount(), e.length, e.path);
}

// The mapping of `e`'s file, made once per load (`defer`'s map): copy-on-write when tensors
// may live in it, else read-only (only copied from, its pages populated when mapped).
const std::shared_ptr<MappedFile>& mapped_file(DeferredCopies& defer, const ExternalSpan& e) {
  std::shared_ptr<MappedFile>& f = defer.external[e.path];
  if (!f) {
    f = std::make_shared<MappedFile>(e.path, "external data",
                                     defer.map_in_place ? MappedFile::Access::CopyOnWrite
                                                        : MappedFile::Access::ReadOnly);
    if (defer.map_in_place) register_tensor_mapping(f);
  }
  return f;
}

// The bytes of `e` in its mapped `file`, for the deferred copy or to live in.
char* mapped_span(MappedFile& file, const ExternalSpan& e, const std::string& what) {
  const std::string_view bytes = file.bytes();
  // The file may have changed since external_span read its size.
  ONYX_CHECK(static_cast<uint64_t>(e.offset) <= bytes.size() &&
                 static_cast<uint64_t>(e.length) <= bytes.size() - static_cast<uint64_t>(e.offset),
             "[external data] {}: wants {} bytes from offset {} of '{}', which now has {} bytes",
             what, e.length, e.offset, e.location, bytes.size());
  return file.writable_data() + e.offset;
}

// How many entries the typed field that holds `dt` has (int32_data for the small types).
int64_t typed_field_size(const onnx::TensorProto& p, DataType dt) {
  switch (dt) {
    case DataType::Float:
    case DataType::Complex64: return p.float_data_size();
    case DataType::Double:
    case DataType::Complex128: return p.double_data_size();
    case DataType::Int64: return p.int64_data_size();
    case DataType::UInt32:
    case DataType::UInt64: return p.uint64_data_size();
    default: return p.int32_data_size();
  }
}

template <typename Src, typename Dst>
void copy_field(const google::protobuf::RepeatedField<Src>& field, Dst* dst, size_t n,
                const std::string& what) {
  ONYX_CHECK(static_cast<size_t>(field.size()) == n,
             "[tensor] {}: holds {} values but its shape needs {}", what, field.size(), n);
  for (size_t i = 0; i < n; ++i) dst[i] = static_cast<Dst>(field.Get(static_cast<int>(i)));
}

}  // namespace

Tensor tensor_from_proto(const onnx::TensorProto& p, const std::string& base_dir,
                         const std::string& what_in, std::optional<std::string_view> raw_data,
                         DeferredCopies* defer) {
  const bool has_raw = raw_data.has_value() || p.has_raw_data();
  const std::string_view raw = raw_data ? *raw_data : std::string_view(p.raw_data());
  std::string what = what_in.empty() ? fmt::format("tensor '{}'", p.name()) : what_in;
  ONYX_CHECK(p.data_type() != 0, "[tensor] {} has no data_type", what);
  ONYX_CHECK(dtype_is_known(p.data_type()), "[tensor] {} has unknown data_type {}", what,
             p.data_type());
  ONYX_CHECK(!p.has_segment(), "[tensor] {} is segmented, which onyx does not read", what);
  auto dt = static_cast<DataType>(p.data_type());
  Shape shape(p.dims().begin(), p.dims().end());
  for (int64_t d : shape) ONYX_CHECK(d >= 0, "[tensor] {} has negative dim in {}", what, shape_str(shape));

  // The declared size is checked against the data present before anything is allocated: a
  // model may declare terabytes over a few bytes.
  const std::optional<size_t> nbytes = checked_nbytes(dt, shape);
  ONYX_CHECK(nbytes, "[tensor] {}: shape {} of {} has more bytes than memory can address", what,
             shape_str(shape), dtype_name(dt));
  const size_t n = static_cast<size_t>(shape_numel(shape));
  const bool external = p.data_location() == onnx::TensorProto::EXTERNAL;
  // Sub-byte types are stored packed (2 or 4 per byte) and held unpacked, one per byte.
  const size_t per_byte = !is_sub_byte(dt) ? 1 : (dt == DataType::Int2 || dt == DataType::UInt2) ? 4 : 2;
  const size_t stored = is_sub_byte(dt) ? (n + per_byte - 1) / per_byte : *nbytes;
  ExternalSpan span;
  if (dt == DataType::String) {
    ONYX_CHECK(static_cast<size_t>(p.string_data_size()) == n,
               "[tensor] {}: holds {} strings but its shape {} needs {}", what,
               p.string_data_size(), shape_str(shape), n);
  } else if (external || has_raw) {
    if (external) span = external_span(p, base_dir, what);
    const size_t have = external ? static_cast<size_t>(span.length) : raw.size();
    ONYX_CHECK(is_sub_byte(dt) ? have >= stored : have == stored,
               "[tensor] {}: {} has {} bytes, but its shape {} of {} needs {} bytes", what,
               external ? fmt::format("external data in '{}'", span.location) : "raw data", have,
               shape_str(shape), dtype_name(dt), stored);
  } else {
    const int64_t have = typed_field_size(p, dt);
    const size_t need = is_sub_byte(dt) ? stored : (dt == DataType::Complex64 || dt == DataType::Complex128) ? 2 * n : n;
    ONYX_CHECK(static_cast<size_t>(have) >= need && (is_sub_byte(dt) || static_cast<size_t>(have) == need),
               "[tensor] {}: holds {} values but its shape {} of {} needs {} ({} bytes)", what, have,
               shape_str(shape), dtype_name(dt), need, *nbytes);
  }

  // A deferred copy's pages are populated by the thread that copies them (onnx_io.cpp).
  const bool deferred = defer && (external || raw_data) && dt != DataType::String &&
                        !is_sub_byte(dt) && n;
  // Weights in place: no copy, no new pages; the mapping lives as long as a tensor in it. Only
  // where the offset suits the element type (torch.onnx's exporter packs tensors back to back,
  // so an int64 after an odd count of floats is 4-byte aligned: reading it in place would be
  // undefined behaviour), else copied below. Kernels take 4-byte aligned floats already (feeds
  // are views of the caller's arrays).
  if (deferred && external && defer->map_in_place) {
    const std::shared_ptr<MappedFile>& file = mapped_file(*defer, span);
    char* at = mapped_span(*file, span, what);
    if (reinterpret_cast<uintptr_t>(at) % dtype_size(dt) == 0) {
      auto storage = std::make_shared<Storage>(at, static_cast<size_t>(span.length), Device{},
                                               [file](void*) {});  // the view keeps the mapping
      return Tensor(dt, shape, std::move(storage));
    }
  }
  Tensor t = Tensor::empty(dt, shape, deferred ? cpu_allocator_unpopulated() : nullptr);
  if (dt == DataType::String) {
    auto* s = t.data<std::string>();
    for (size_t i = 0; i < n; ++i) s[i] = p.string_data(static_cast<int>(i));
    return t;
  }
  if (external || has_raw) {
    if (is_sub_byte(dt)) {
      std::string ext(external ? static_cast<size_t>(span.length) : 0, '\0');
      if (external) read_span(span, ext.data(), what);
      const std::string_view packed = external ? std::string_view(ext) : raw;
      unpack_sub_byte(reinterpret_cast<const uint8_t*>(packed.data()), packed.size(), dt,
                      t.data_as<uint8_t>(), n, what);
    } else if (external) {
      if (deferred)
        defer->copies.push_back(
            {t, mapped_span(*mapped_file(*defer, span), span, what), static_cast<size_t>(span.length)});
      else if (n)
        read_span(span, t.raw(), what);
    } else if (n) {
      if (deferred)
        defer->copies.push_back({t, raw.data(), raw.size()});
      else
        std::memcpy(t.raw(), raw.data(), raw.size());
    }
    return t;
  }
  switch (dt) {
    case DataType::Float: copy_field(p.float_data(), t.data<float>(), n, what); break;
    case DataType::Complex64: copy_field(p.float_data(), t.data_as<float>(), 2 * n, what); break;
    case DataType::Double: copy_field(p.double_data(), t.data<double>(), n, what); break;
    case DataType::Complex128: copy_field(p.double_data(), t.data_as<double>(), 2 * n, what); break;
    case DataType::Int64: copy_field(p.int64_data(), t.data<int64_t>(), n, what); break;
    case DataType::UInt32: copy_field(p.uint64_data(), t.data<uint32_t>(), n, what); break;
    case DataType::UInt64: copy_field(p.uint64_data(), t.data<uint64_t>(), n, what); break;
    case DataType::Int32: copy_field(p.int32_data(), t.data<int32_t>(), n, what); break;
    case DataType::Int16: copy_field(p.int32_data(), t.data<int16_t>(), n, what); break;
    case DataType::Int8: copy_field(p.int32_data(), t.data<int8_t>(), n, what); break;
    case DataType::UInt16: copy_field(p.int32_data(), t.data<uint16_t>(), n, what); break;
    case DataType::UInt8: copy_field(p.int32_data(), t.data<uint8_t>(), n, what); break;
    case DataType::Bool: copy_field(p.int32_data(), t.data<bool>(), n, what); break;
    case DataType::Float16:
    case DataType::BFloat16: copy_field(p.int32_data(), t.data_as<uint16_t>(), n, what); break;
    default:
      if (is_sub_byte(dt)) {
        std::string bytes;
        for (int v : p.int32_data()) bytes.push_back(static_cast<char>(v));
        unpack_sub_byte(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), dt,
                        t.data_as<uint8_t>(), n, what);
      } else if (is_float8(dt)) {
        copy_field(p.int32_data(), t.data_as<uint8_t>(), n, what);
      } else {
        ONYX_THROW("[tensor] {}: cannot read {} data", what, dtype_name(dt));
      }
  }
  return t;
}

void tensor_to_proto(const Tensor& t, const std::string& name, onnx::TensorProto* p) {
  p->Clear();
  p->set_name(name);
  p->set_data_type(static_cast<int32_t>(t.dtype()));
  for (int64_t d : t.shape()) p->add_dims(d);
  if (t.dtype() == DataType::String) {
    const auto* s = t.data<std::string>();
    for (int64_t i = 0; i < t.numel(); ++i) p->add_string_data(s[i]);
  } else if (is_sub_byte(t.dtype())) {
    p->set_raw_data(pack_sub_byte(t.data_as<uint8_t>(), static_cast<size_t>(t.numel()), t.dtype()));
  } else {
    p->set_raw_data(std::string(static_cast<const char*>(t.raw()), t.nbytes()));
  }
}

ValueType value_type_from_proto(const onnx::TypeProto& p) {
  ValueType t;
  switch (p.value_case()) {
    case onnx::TypeProto::kTensorType:
    case onnx::TypeProto::kSparseTensorType: {
      bool sparse = p.value_case() == onnx::TypeProto::kSparseTensorType;
      int32_t elem = sparse ? p.sparse_tensor_type().elem_type() : p.tensor_type().elem_type();
      bool has_shape = sparse ? p.sparse_tensor_type().has_shape() : p.tensor_type().has_shape();
      const auto& shp = sparse ? p.sparse_tensor_type().shape() : p.tensor_type().shape();
      t.kind = sparse ? ValueType::Kind::SparseTensor : ValueType::Kind::Tensor;
      t.elem = dtype_is_known(elem) ? static_cast<DataType>(elem) : DataType::Undefined;
      if (has_shape) {
        SymShape s;
        for (const auto& d : shp.dim()) {
          if (d.has_dim_value()) s.push_back(Dim::fixed(d.dim_value()));
          else if (d.has_dim_param()) s.push_back(Dim::symbol(d.dim_param()));
          else s.push_back(Dim{});
        }
        t.shape = std::move(s);
      }
      break;
    }
    case onnx::TypeProto::kSequenceType:
      t.kind = ValueType::Kind::Sequence;
      t.inner = std::make_shared<ValueType>(value_type_from_proto(p.sequence_type().elem_type()));
      break;
    case onnx::TypeProto::kOptionalType:
      t.kind = ValueType::Kind::Optional;
      t.inner = std::make_shared<ValueType>(value_type_from_proto(p.optional_type().elem_type()));
      break;
    case onnx::TypeProto::kMapType:
      t.kind = ValueType::Kind::Map;
      t.key = static_cast<DataType>(p.map_type().key_type());
      t.inner = std::make_shared<ValueType>(value_type_from_proto(p.map_type().value_type()));
      break;
    default:
      break;
  }
  return t;
}

void value_type_to_proto(const ValueType& t, onnx::TypeProto* p) {
  auto write_shape = [&](onnx::TensorShapeProto* sp) {
    for (const auto& d : *t.shape) {
      auto* dp = sp->add_dim();
      if (d.is_fixed()) dp->set_dim_value(d.value);
      else if (!d.param.empty()) dp->set_dim_param(d.param);
    }
  };
  switch (t.kind) {
    case ValueType::Kind::Tensor: {
      auto* tt = p->mutable_tensor_type();
      tt->set_elem_type(static_cast<int32_t>(t.elem));
      if (t.shape) write_shape(tt->mutable_shape());
      break;
    }
    case ValueType::Kind::SparseTensor: {
      auto* tt = p->mutable_sparse_tensor_type();
      tt->set_elem_type(static_cast<int32_t>(t.elem));
      if (t.shape) write_shape(tt->mutable_shape());
      break;
    }
    case ValueType::Kind::Sequence:
      if (t.inner) value_type_to_proto(*t.inner, p->mutable_sequence_type()->mutable_elem_type());
      else p->mutable_sequence_type();
      break;
    case ValueType::Kind::Optional:
      if (t.inner) value_type_to_proto(*t.inner, p->mutable_optional_type()->mutable_elem_type());
      else p->mutable_optional_type();
      break;
    case ValueType::Kind::Map:
      p->mutable_map_type()->set_key_type(static_cast<int32_t>(t.key));
      if (t.inner) value_type_to_proto(*t.inner, p->mutable_map_type()->mutable_value_type());
      break;
    default:
      break;
  }
}

}  // namespace onyx
