#include "launcher/npy.h"

#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>

namespace onyx::npy {
namespace {

static_assert(std::endian::native == std::endian::little, "npy I/O assumes a little-endian host");

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
constexpr size_t kAlign = 64;  // numpy pads headers so data starts 64-byte aligned

/// A numpy dtype as a kind letter and item size ("<f4" -> 'f', 4).
struct Descr {
  char order = '<';
  char kind = 0;
  size_t size = 0;
};

/// The numpy kind and item size of onyx dtypes stored as numpy stores them.
std::optional<Descr> native_descr(DataType t) {
  switch (t) {
    case DataType::Float:
      return Descr{'<', 'f', 4};
    case DataType::Double:
      return Descr{'<', 'f', 8};
    case DataType::Float16:
      return Descr{'<', 'f', 2};
    case DataType::Int8:
      return Descr{'|', 'i', 1};
    case DataType::Int16:
      return Descr{'<', 'i', 2};
    case DataType::Int32:
      return Descr{'<', 'i', 4};
    case DataType::Int64:
      return Descr{'<', 'i', 8};
    case DataType::UInt8:
      return Descr{'|', 'u', 1};
    case DataType::UInt16:
      return Descr{'<', 'u', 2};
    case DataType::UInt32:
      return Descr{'<', 'u', 4};
    case DataType::UInt64:
      return Descr{'<', 'u', 8};
    case DataType::Bool:
      return Descr{'|', 'b', 1};
    case DataType::Complex64:
      return Descr{'<', 'c', 8};
    case DataType::Complex128:
      return Descr{'<', 'c', 16};
    default:
      return std::nullopt;
  }
}

/// The dtype a type numpy lacks is stored as (bfloat16 -> uint16); the type itself otherwise.
DataType file_dtype(DataType t) {
  if (t == DataType::BFloat16) return DataType::UInt16;
  if (t == DataType::Int4 || t == DataType::Int2) return DataType::Int8;
  if (is_float8(t) || t == DataType::UInt4 || t == DataType::UInt2) return DataType::UInt8;
  return t;
}

std::string descr_str(const Descr& d) { return fmt::format("{}{}{}", d.order, d.kind, d.size); }

// ---- header parsing: the Python dict literal numpy writes -------------------------------

struct HeaderParser {
  const std::string& s;
  const std::string& source;
  size_t pos = 0;

  [[noreturn]] void fail(const std::string& what) const {
    ONYX_THROW("[npy] '{}': malformed header ({}): {}", source, what, s);
  }
  void skip_ws() {
    while (pos < s.size() && std::isspace(static_cast<unsigned char>(s[pos]))) ++pos;
  }
  bool eat(char c) {
    skip_ws();
    if (pos < s.size() && s[pos] == c) return ++pos, true;
    return false;
  }
  void expect(char c) {
    if (!eat(c)) fail(fmt::format("expected '{}'", c));
  }
  std::string string_lit() {
    skip_ws();
    if (pos >= s.size() || (s[pos] != '\'' && s[pos] != '"')) fail("expected a string");
    char q = s[pos++];
    size_t end = s.find(q, pos);
    if (end == std::string::npos) fail("unterminated string");
    std::string out = s.substr(pos, end - pos);
    pos = end + 1;
    return out;
  }
  std::string word() {
    skip_ws();
    size_t start = pos;
    while (pos < s.size() && std::isalnum(static_cast<unsigned char>(s[pos]))) ++pos;
    return s.substr(start, pos - start);
  }
  bool boolean() {
    std::string w = word();
    if (w == "True") return true;
    if (w == "False") return false;
    fail("expected True or False");
  }
  Shape tuple() {
    expect('(');
    Shape shape;
    while (!eat(')')) {
      std::string w = word();
      if (!w.empty() && w.back() == 'L') w.pop_back();  // Python 2 longs
      if (w.empty() || w.find_first_not_of("0123456789") != std::string::npos)
        fail("expected a dimension");
      errno = 0;
      int64_t d = std::strtoll(w.c_str(), nullptr, 10);
      if (errno == ERANGE) fail("dimension out of range");
      shape.push_back(d);
      if (!eat(',')) {
        expect(')');
        break;
      }
    }
    return shape;
  }
};

struct Header {
  std::string descr;
  bool fortran_order = false;
  Shape shape;
};

Header parse_header(const std::string& text, const std::string& source) {
  HeaderParser p{text, source};
  Header h;
  bool has_descr = false, has_order = false, has_shape = false;
  p.expect('{');
  while (!p.eat('}')) {
    std::string key = p.string_lit();
    p.expect(':');
    if (key == "descr") {
      p.skip_ws();
      if (p.pos < text.size() && text[p.pos] == '[')
        ONYX_THROW("[npy] '{}': structured (record) arrays are not supported", source);
      h.descr = p.string_lit();
      has_descr = true;
    } else if (key == "fortran_order") {
      h.fortran_order = p.boolean();
      has_order = true;
    } else if (key == "shape") {
      h.shape = p.tuple();
      has_shape = true;
    } else {
      p.fail(fmt::format("unexpected key '{}'", key));
    }
    if (!p.eat(',')) {
      p.expect('}');
      break;
    }
  }
  if (!has_descr || !has_order || !has_shape) p.fail("needs 'descr', 'fortran_order' and 'shape'");
  return h;
}

/// Parses "<f4" and friends into a Descr; refuses big-endian multi-byte data.
Descr parse_descr(const std::string& d, const std::string& source) {
  ONYX_CHECK(d.size() >= 2 && std::strchr("<>|=", d[0]), "[npy] '{}': unsupported numpy dtype '{}'",
             source, d);
  Descr out;
  out.order = d[0] == '=' ? '<' : d[0];
  out.kind = d[1];
  std::string digits = d.substr(2);
  ONYX_CHECK(std::strchr("fiubcUS", out.kind) && !digits.empty() &&
                 digits.find_first_not_of("0123456789") == std::string::npos && digits.size() < 10,
             "[npy] '{}': unsupported numpy dtype '{}' (onyx reads bool, int, uint, float, "
             "complex and unicode/bytes string arrays)",
             source, d);
  out.size = std::stoull(digits);
  size_t item = out.kind == 'U' ? out.size * 4 : out.size;
  ONYX_CHECK(out.order != '>' || out.kind == 'S' || item <= 1,
             "[npy] '{}': big-endian data ('{}') is not supported; convert with "
             "a.astype(a.dtype.newbyteorder('<'))",
             source, d);
  return out;
}

DataType dtype_for(const Descr& d, const std::string& raw, const std::string& source) {
  if (d.kind == 'U' || d.kind == 'S') return DataType::String;
  for (DataType t :
       {DataType::Float, DataType::Double, DataType::Float16, DataType::Int8, DataType::Int16,
        DataType::Int32, DataType::Int64, DataType::UInt8, DataType::UInt16, DataType::UInt32,
        DataType::UInt64, DataType::Bool, DataType::Complex64, DataType::Complex128}) {
    auto n = native_descr(t);
    if (n->kind == d.kind && n->size == d.size) return t;
  }
  ONYX_THROW("[npy] '{}': unsupported numpy dtype '{}'", source, raw);
}

// ---- strings: UTF-8 in onyx, UTF-32LE in numpy ------------------------------------------

void append_utf8(std::string& out, char32_t c) {
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
}

/// Strict UTF-8 decoding; nullopt on malformed input.
std::optional<std::u32string> utf8_to_utf32(const std::string& s) {
  std::u32string out;
  for (size_t i = 0; i < s.size();) {
    auto b = static_cast<unsigned char>(s[i]);
    int len = b < 0x80 ? 1 : (b >> 5) == 0x6 ? 2 : (b >> 4) == 0xE ? 3 : (b >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return std::nullopt;
    char32_t c = len == 1 ? b : b & (0x7F >> len);
    for (int k = 1; k < len; ++k) {
      auto cont = static_cast<unsigned char>(s[i + k]);
      if ((cont & 0xC0) != 0x80) return std::nullopt;
      c = (c << 6) | (cont & 0x3F);
    }
    static constexpr char32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < kMin[len] || c > 0x10FFFF || (c >= 0xD800 && c <= 0xDFFF)) return std::nullopt;
    out += c;
    i += len;
  }
  return out;
}

Tensor decode_strings(const Descr& d, const Shape& shape, const char* data,
                      const std::string& source) {
  Tensor t = Tensor::empty(DataType::String, shape);
  auto* out = t.data<std::string>();
  size_t chars = d.size, item = d.kind == 'U' ? chars * 4 : chars;
  for (int64_t i = 0; i < t.numel(); ++i) {
    const char* p = data + static_cast<size_t>(i) * item;
    std::string s;
    if (d.kind == 'S') {
      s.assign(p, strnlen(p, chars));
    } else {
      size_t n = chars;
      auto at = [&](size_t k) {
        char32_t c;
        std::memcpy(&c, p + 4 * k, 4);
        return c;
      };
      while (n > 0 && at(n - 1) == 0) --n;  // numpy pads with NULs
      for (size_t k = 0; k < n; ++k) {
        char32_t c = at(k);
        ONYX_CHECK(c <= 0x10FFFF && (c < 0xD800 || c > 0xDFFF),
                   "[npy] '{}': string element {} holds an invalid code point U+{:X}", source, i,
                   static_cast<uint32_t>(c));
        append_utf8(s, c);
      }
    }
    out[i] = std::move(s);
  }
  return t;
}

std::string shape_tuple(const Shape& shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

/// Header and padding for `descr` and `shape`, in the smallest format version that fits.
std::string make_preamble(const std::string& descr, const Shape& shape) {
  std::string dict = fmt::format("{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}", descr,
                                 shape_tuple(shape));
  for (int version : {1, 2}) {
    size_t len_bytes = version == 1 ? 2 : 4;
    size_t prefix = kMagicLen + 2 + len_bytes;
    size_t total = (prefix + dict.size() + 1 + kAlign - 1) / kAlign * kAlign;
    size_t header_len = total - prefix;
    if (version == 1 && header_len > 0xFFFF) continue;
    std::string out(kMagic, kMagicLen);
    out += static_cast<char>(version);
    out += '\0';
    for (size_t k = 0; k < len_bytes; ++k) out += static_cast<char>((header_len >> (8 * k)) & 0xFF);
    out += dict;
    out.append(header_len - dict.size() - 1, ' ');
    out += '\n';
    return out;
  }
  ONYX_THROW("[npy] header too long");
}

uint64_t read_le(const std::string& b, size_t at, size_t n) {
  uint64_t v = 0;
  for (size_t k = 0; k < n; ++k) v |= uint64_t(static_cast<unsigned char>(b[at + k])) << (8 * k);
  return v;
}

}  // namespace

std::string numpy_descr(DataType t) {
  if (t == DataType::String) return "<U";
  auto d = native_descr(file_dtype(t));
  ONYX_CHECK(d.has_value(), "[npy] no numpy dtype for {}", dtype_name(t));
  return descr_str(*d);
}

std::string encode(const Tensor& t) {
  ONYX_CHECK(t.defined(), "[npy] cannot write an undefined tensor");
  ONYX_CHECK(t.device().type == DeviceType::CPU, "[npy] cannot write a tensor on {}",
             t.device().str());
  if (t.dtype() != DataType::String) {
    std::string out = make_preamble(numpy_descr(t.dtype()), t.shape());
    out.append(static_cast<const char*>(t.raw()), t.nbytes());
    return out;
  }
  const auto* in = t.data<std::string>();
  std::vector<std::u32string> wide(static_cast<size_t>(t.numel()));
  size_t width = 1;  // numpy writes empty strings as <U1
  for (size_t i = 0; i < wide.size(); ++i) {
    auto w = utf8_to_utf32(in[i]);
    ONYX_CHECK(w.has_value(), "[npy] string element {} is not valid UTF-8", i);
    wide[i] = std::move(*w);
    width = std::max(width, wide[i].size());
  }
  std::string out = make_preamble(fmt::format("<U{}", width), t.shape());
  size_t start = out.size();
  out.resize(start + wide.size() * width * 4, '\0');
  for (size_t i = 0; i < wide.size(); ++i)
    std::memcpy(out.data() + start + i * width * 4, wide[i].data(), wide[i].size() * 4);
  return out;
}

Tensor decode(const std::string& bytes, const std::string& source) {
  if (bytes.size() >= 4 && bytes.compare(0, 4, "PK\x03\x04") == 0)
    ONYX_THROW("[npy] '{}' is a zip (.npz) archive; save each array with numpy.save", source);
  ONYX_CHECK(bytes.size() >= kMagicLen + 4 && bytes.compare(0, kMagicLen, kMagic, kMagicLen) == 0,
             "[npy] '{}' is not a .npy file (no \\x93NUMPY magic)", source);
  int major = static_cast<unsigned char>(bytes[kMagicLen]);
  ONYX_CHECK(major >= 1 && major <= 3, "[npy] '{}': unsupported .npy format version {}.{}", source,
             major, static_cast<int>(static_cast<unsigned char>(bytes[kMagicLen + 1])));
  size_t len_bytes = major == 1 ? 2 : 4;
  ONYX_CHECK(bytes.size() >= kMagicLen + 2 + len_bytes, "[npy] '{}': truncated header", source);
  size_t header_len = read_le(bytes, kMagicLen + 2, len_bytes);
  size_t data_at = kMagicLen + 2 + len_bytes + header_len;
  ONYX_CHECK(data_at <= bytes.size(),
             "[npy] '{}': truncated header ({} bytes declared, {} present)", source, header_len,
             bytes.size() - (kMagicLen + 2 + len_bytes));
  Header h = parse_header(bytes.substr(kMagicLen + 2 + len_bytes, header_len), source);
  ONYX_CHECK(!h.fortran_order,
             "[npy] '{}': Fortran-order arrays are not supported; save "
             "numpy.ascontiguousarray(a) instead",
             source);
  Descr d = parse_descr(h.descr, source);
  DataType dt = dtype_for(d, h.descr, source);

  // numpy never writes zero-width strings ('<U0' reads back as '<U1'); allowing them would let
  // a few header bytes declare 10^15 elements that need no data bytes.
  ONYX_CHECK(d.size > 0, "[npy] '{}': dtype '{}' has zero-width elements", source, h.descr);
  size_t item = d.kind == 'U' ? d.size * 4 : d.size, numel = 1;
  for (int64_t dim : h.shape)
    ONYX_CHECK(!__builtin_mul_overflow(numel, static_cast<size_t>(dim), &numel),
               "[npy] '{}': shape {} is too large", source, shape_str(h.shape));
  size_t need = 0;
  ONYX_CHECK(!__builtin_mul_overflow(numel, item, &need), "[npy] '{}': shape {} is too large",
             source, shape_str(h.shape));
  size_t have = bytes.size() - data_at;
  ONYX_CHECK(have >= need, "[npy] '{}' is truncated: {} {} needs {} data bytes, the file has {}",
             source, h.descr, shape_str(h.shape), need, have);
  ONYX_CHECK(have == need, "[npy] '{}': {} unexpected bytes after the array data", source,
             have - need);

  const char* data = bytes.data() + data_at;
  if (dt == DataType::String) return decode_strings(d, h.shape, data, source);
  Tensor t = Tensor::empty(dt, h.shape);
  if (need > 0) std::memcpy(t.raw(), data, need);
  if (dt == DataType::Bool) {  // any nonzero byte is true; keep bools 0/1
    auto* b = t.data_as<uint8_t>();
    for (size_t i = 0; i < numel; ++i) b[i] = b[i] != 0;
  }
  return t;
}

void save(const Tensor& t, const std::string& path) {
  std::string bytes = encode(t);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  ONYX_CHECK(f.good(), "[npy] cannot write '{}': {}", path, std::strerror(errno));
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  ONYX_CHECK(f.good(), "[npy] writing '{}' failed: {}", path, std::strerror(errno));
}

Tensor load(const std::string& path) {
  std::error_code ec;
  ONYX_CHECK(std::filesystem::exists(path, ec), "[npy] '{}': no such file", path);
  ONYX_CHECK(std::filesystem::is_regular_file(path, ec), "[npy] '{}' is not a regular file", path);
  std::ifstream f(path, std::ios::binary);
  ONYX_CHECK(f.good(), "[npy] cannot open '{}': {}", path, std::strerror(errno));
  std::ostringstream ss;
  ss << f.rdbuf();
  ONYX_CHECK(!f.bad(), "[npy] reading '{}' failed", path);
  return decode(ss.str(), path);
}

Tensor convert_for_input(Tensor t, DataType expected, const std::string& path,
                         const std::string& input_name) {
  if (t.dtype() == expected) return t;
  auto numpy_of = [](DataType dt) {
    return dt == DataType::String ? std::string("<U") : numpy_descr(dt);
  };
  ONYX_CHECK(expected != DataType::String && file_dtype(expected) == t.dtype(),
             "[npy] '{}' for input '{}': expected {} (numpy {}), found {} (numpy {})", path,
             input_name, dtype_name(expected), numpy_of(expected), dtype_name(t.dtype()),
             numpy_of(t.dtype()));
  if (is_sub_byte(expected)) {
    int lo = 0, hi = 15;
    if (expected == DataType::Int4) lo = -8, hi = 7;
    if (expected == DataType::Int2) lo = -2, hi = 1;
    if (expected == DataType::UInt2) hi = 3;
    bool is_signed = t.dtype() == DataType::Int8;
    for (int64_t i = 0; i < t.numel(); ++i) {
      int v = is_signed ? t.data_as<int8_t>()[i] : t.data_as<uint8_t>()[i];
      ONYX_CHECK(v >= lo && v <= hi,
                 "[npy] '{}' for input '{}' ({}): element {} is {}, outside [{}, {}]", path,
                 input_name, dtype_name(expected), i, v, lo, hi);
    }
  }
  return Tensor(expected, t.shape(), t.storage(), t.offset());
}

Tensor load_as(const std::string& path, DataType expected, const std::string& input_name) {
  return convert_for_input(load(path), expected, path, input_name);
}

}  // namespace onyx::npy
