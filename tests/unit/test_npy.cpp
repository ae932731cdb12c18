// .npy reading and writing (launcher/npy.h): round trips for every dtype and convention,
// byte-exact agreement with files numpy wrote (launcher/testdata/numpy_fixtures.txt), and
// the errors bad files give.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>

#include "launcher/npy.h"

namespace onyx {
namespace {

/// The .npy files numpy wrote, by name (see launcher/testdata/make_npy_fixtures.py).
const std::map<std::string, std::string>& numpy_files() {
  static const auto files = [] {
    std::map<std::string, std::string> out;
    std::ifstream f(std::string(ONYX_SOURCE_DIR) + "/launcher/testdata/numpy_fixtures.txt");
    std::string name, hex;
    while (f >> name >> hex) {
      std::string bytes;
      for (size_t i = 0; i + 1 < hex.size(); i += 2)
        bytes += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
      out[name] = bytes;
    }
    return out;
  }();
  return files;
}
const std::string& numpy_file(const std::string& name) {
  auto it = numpy_files().find(name);
  if (it == numpy_files().end()) throw std::runtime_error("no numpy fixture " + name);
  return it->second;
}

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("onyx_test_npy_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

/// Element bytes of `n` elements cycling through a pattern valid for every 1-byte type.
Tensor patterned(DataType dt, const Shape& shape) {
  Tensor t = Tensor::empty(dt, shape);
  auto* b = static_cast<unsigned char*>(t.raw());
  for (size_t i = 0; i < t.nbytes(); ++i) b[i] = static_cast<unsigned char>((i * 37 + 5) & 0xFF);
  return t;
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

struct Case {
  DataType dtype;
  std::string descr;    // what the file says
  DataType file_dtype;  // what reading it without a model gives
};

TEST(Npy, RoundTripEveryNumericDtypeAndConvention) {
  const std::vector<Case> cases = {
      {DataType::Float, "<f4", DataType::Float},
      {DataType::Double, "<f8", DataType::Double},
      {DataType::Float16, "<f2", DataType::Float16},
      {DataType::BFloat16, "<u2", DataType::UInt16},
      {DataType::Int8, "|i1", DataType::Int8},
      {DataType::Int16, "<i2", DataType::Int16},
      {DataType::Int32, "<i4", DataType::Int32},
      {DataType::Int64, "<i8", DataType::Int64},
      {DataType::UInt8, "|u1", DataType::UInt8},
      {DataType::UInt16, "<u2", DataType::UInt16},
      {DataType::UInt32, "<u4", DataType::UInt32},
      {DataType::UInt64, "<u8", DataType::UInt64},
      {DataType::Complex64, "<c8", DataType::Complex64},
      {DataType::Complex128, "<c16", DataType::Complex128},
      {DataType::Float8E4M3FN, "|u1", DataType::UInt8},
      {DataType::Float8E4M3FNUZ, "|u1", DataType::UInt8},
      {DataType::Float8E5M2, "|u1", DataType::UInt8},
      {DataType::Float8E5M2FNUZ, "|u1", DataType::UInt8},
      {DataType::Float8E8M0, "|u1", DataType::UInt8},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(dtype_name(c.dtype));
    Tensor t = patterned(c.dtype, {2, 3});
    std::string bytes = npy::encode(t);
    EXPECT_NE(bytes.find("'descr': '" + c.descr + "'"), std::string::npos);
    EXPECT_EQ(npy::numpy_descr(c.dtype), c.descr);
    Tensor raw = npy::decode(bytes);
    EXPECT_EQ(raw.dtype(), c.file_dtype);
    EXPECT_EQ(raw.shape(), (Shape{2, 3}));
    Tensor back = npy::convert_for_input(raw, c.dtype, "x.npy", "x");
    EXPECT_TRUE(same_bytes(t, back));
  }
}

TEST(Npy, RoundTripBoolAndSubByteTypes) {
  Tensor b = Tensor::from_vector<bool>({4}, {true, false, false, true});
  Tensor bb = npy::decode(npy::encode(b));
  ASSERT_EQ(bb.dtype(), DataType::Bool);
  EXPECT_EQ(bb.to_int64_vector(), (std::vector<int64_t>{1, 0, 0, 1}));

  struct Sub {
    DataType dtype;
    std::vector<int> values;  // the full range of the type
    std::string descr;
  };
  const std::vector<Sub> subs = {
      {DataType::Int4, {-8, -1, 0, 7}, "|i1"},      {DataType::Int2, {-2, -1, 0, 1}, "|i1"},
      {DataType::UInt4, {0, 1, 9, 15}, "|u1"},      {DataType::UInt2, {0, 1, 2, 3}, "|u1"},
      {DataType::Float4E2M1, {0, 7, 8, 15}, "|u1"},
  };
  for (const auto& s : subs) {
    SCOPED_TRACE(dtype_name(s.dtype));
    Tensor t = Tensor::empty(s.dtype, {4});
    for (size_t i = 0; i < 4; ++i) t.data_as<int8_t>()[i] = static_cast<int8_t>(s.values[i]);
    std::string bytes = npy::encode(t);
    EXPECT_NE(bytes.find("'descr': '" + s.descr + "'"), std::string::npos);
    Tensor back = npy::convert_for_input(npy::decode(bytes), s.dtype, "x.npy", "x");
    EXPECT_TRUE(same_bytes(t, back));
  }
}

TEST(Npy, RoundTripStringsAsUtf32) {
  Tensor t = Tensor::from_vector<std::string>({2, 2}, {"a", "h\xc3\xa9llo", "", "\xe6\x97\xa5"});
  std::string bytes = npy::encode(t);
  EXPECT_NE(bytes.find("'descr': '<U5'"), std::string::npos);
  Tensor back = npy::decode(bytes);
  ASSERT_EQ(back.dtype(), DataType::String);
  EXPECT_EQ(back.shape(), (Shape{2, 2}));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(back.data<std::string>()[i], t.data<std::string>()[i]);
  // All-empty strings are written as numpy writes them: <U1.
  Tensor empty = Tensor::from_vector<std::string>({1}, {""});
  EXPECT_NE(npy::encode(empty).find("'descr': '<U1'"), std::string::npos);
  EXPECT_EQ(npy::decode(npy::encode(empty)).data<std::string>()[0], "");
}

TEST(Npy, ShapesScalarEmptyAndFileRoundTrip) {
  Tensor s = Tensor::scalar<double>(3.25);
  Tensor s2 = npy::decode(npy::encode(s));
  EXPECT_EQ(s2.shape(), Shape{});
  EXPECT_EQ(s2.data<double>()[0], 3.25);

  Tensor z = Tensor::empty(DataType::Int64, {0, 2});
  Tensor z2 = npy::decode(npy::encode(z));
  EXPECT_EQ(z2.shape(), (Shape{0, 2}));

  std::string path = temp_path("roundtrip.npy");
  Tensor x = Tensor::from_vector<float>({3}, {1.5f, -2, 0});
  npy::save(x, path);
  Tensor y = npy::load_as(path, DataType::Float, "x");
  EXPECT_TRUE(same_bytes(x, y));
}

TEST(Npy, HeaderIsNumpysFormat) {
  std::string bytes = npy::encode(Tensor::zeros(DataType::Float, {2, 3}));
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  size_t header_len = static_cast<unsigned char>(bytes[8]) | static_cast<unsigned char>(bytes[9])
                                                                 << 8;
  EXPECT_EQ((10 + header_len) % 64, 0u);
  EXPECT_EQ(bytes[10 + header_len - 1], '\n');
  EXPECT_EQ(bytes.size(), 10 + header_len + 24);
}

TEST(Npy, WritesTheBytesNumpyWrites) {
  Tensor f = Tensor::from_vector<float>({2, 3}, {-2.5f, -1.5f, -0.5f, 0.5f, 1.5f, 2.5f});
  EXPECT_EQ(npy::encode(f), numpy_file("f4_2x3"));
  EXPECT_EQ(npy::encode(Tensor::scalar<double>(3.25)), numpy_file("f8_scalar"));
  EXPECT_EQ(npy::encode(Tensor::empty(DataType::Int64, {0, 2})), numpy_file("i8_0x2"));
  EXPECT_EQ(npy::encode(Tensor::from_vector<bool>({4}, {true, false, false, true})),
            numpy_file("b1_4"));
  Tensor s =
      Tensor::from_vector<std::string>({4}, {"a", "h\xc3\xa9llo", "", "\xe6\x97\xa5\xe6\x9c\xac"});
  EXPECT_EQ(npy::encode(s), numpy_file("U_strings"));
  Tensor bf = Tensor::empty(DataType::BFloat16, {3});
  bf.data<bfloat16>()[0] = bfloat16(1.0f);
  bf.data<bfloat16>()[1] = bfloat16(-2.0f);
  bf.data<bfloat16>()[2] = bfloat16(0.0f);
  EXPECT_EQ(npy::encode(bf), numpy_file("u2_bits_3"));
}

TEST(Npy, ReadsWhatNumpyWrites) {
  Tensor f = npy::decode(numpy_file("f4_2x3"));
  EXPECT_EQ(f.shape(), (Shape{2, 3}));
  EXPECT_EQ(f.to_double_vector(), (std::vector<double>{-2.5, -1.5, -0.5, 0.5, 1.5, 2.5}));
  EXPECT_EQ(npy::decode(numpy_file("f8_scalar")).data<double>()[0], 3.25);
  Tensor h = npy::decode(numpy_file("f2_3"));
  ASSERT_EQ(h.dtype(), DataType::Float16);
  EXPECT_EQ(h.to_double_vector(), (std::vector<double>{1.0, -2.0, 0.5}));
  EXPECT_EQ(npy::decode(numpy_file("i8_0x2")).shape(), (Shape{0, 2}));
  EXPECT_EQ(npy::decode(numpy_file("b1_4")).to_int64_vector(), (std::vector<int64_t>{1, 0, 0, 1}));
  EXPECT_EQ(npy::decode(numpy_file("i4_v2")).to_int64_vector(), (std::vector<int64_t>{1, -2, 3}));
  EXPECT_EQ(npy::decode(numpy_file("i4_v3")).to_int64_vector(), (std::vector<int64_t>{7, 8}));

  Tensor u = npy::decode(numpy_file("U_strings"));
  ASSERT_EQ(u.dtype(), DataType::String);
  std::vector<std::string> want = {"a", "h\xc3\xa9llo", "", "\xe6\x97\xa5\xe6\x9c\xac"};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(u.data<std::string>()[i], want[i]);
  Tensor b = npy::decode(numpy_file("S_bytes"));
  EXPECT_EQ(b.data<std::string>()[0], "ab");
  EXPECT_EQ(b.data<std::string>()[1], "xyz");

  // A uint16 file feeds a bfloat16 input bit for bit.
  Tensor bf = npy::convert_for_input(npy::decode(numpy_file("u2_bits_3")), DataType::BFloat16,
                                     "bits.npy", "x");
  ASSERT_EQ(bf.dtype(), DataType::BFloat16);
  EXPECT_EQ(bf.to_double_vector(), (std::vector<double>{1.0, -2.0, 0.0}));
}

/// Runs `f`, expecting an onyx::Error whose message holds every one of `parts`.
template <typename F>
void expect_error(F&& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no onyx::Error thrown";
  } catch (const Error& e) {
    for (const auto& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos)
          << "'" << p << "' not in: " << e.what();
  }
}

TEST(Npy, RefusesFortranOrderBigEndianAndStructured) {
  expect_error([] { npy::decode(numpy_file("fortran_2x2"), "f.npy"); }, {"f.npy", "Fortran"});
  expect_error([] { npy::decode(numpy_file("big_endian_i4"), "b.npy"); }, {"b.npy", "big-endian"});
  expect_error([] { npy::decode(numpy_file("structured"), "s.npy"); }, {"s.npy", "structured"});
}

TEST(Npy, BadFilesThrow) {
  expect_error([] { npy::load(temp_path("does_not_exist.npy")); },
               {"does_not_exist.npy", "no such file"});
  const std::string& good = numpy_file("f4_2x3");
  std::string cut = temp_path("truncated.npy");
  write_file(cut, good.substr(0, good.size() - 5));
  expect_error([&] { npy::load(cut); }, {"truncated.npy", "truncated", "24"});
  expect_error([&] { npy::decode(good.substr(0, 40), "h.npy"); }, {"h.npy", "truncated header"});
  expect_error([] { npy::decode("hello world, not numpy", "t.npy"); }, {"t.npy", "not a .npy"});
  expect_error([] { npy::decode("PK\x03\x04 rest of a zip", "a.npz"); }, {"a.npz", "npz"});
  std::string bad_descr = good;
  bad_descr.replace(bad_descr.find("<f4"), 3, "<M8");
  expect_error([&] { npy::decode(bad_descr, "d.npy"); }, {"d.npy", "<M8"});
  expect_error([&] { npy::decode(good + "xx", "x.npy"); }, {"x.npy", "2 unexpected bytes"});
}

// Found by tests/fuzz/fuzz_npy.cpp: a zero-width string dtype needs no data bytes, so a
// 120-byte file declared 10^15 strings and decode() tried to allocate them all.
TEST(Npy, ZeroWidthStringsAreRefusedBeforeAllocation) {
  std::string header = "{'descr': '<U0', 'fortran_order': False, 'shape': (1000000000000000,), }";
  const size_t total = (10 + header.size() + 1 + 63) / 64 * 64;  // numpy aligns data to 64 bytes
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string file = std::string("\x93NUMPY\x01\x00", 8);
  file += static_cast<char>(header.size() & 0xff);
  file += static_cast<char>(header.size() >> 8);
  file += header;
  expect_error([&] { npy::decode(file, "u0.npy"); }, {"u0.npy", "'<U0'", "zero-width"});
  // The same file with '|S0' (bytes) is refused the same way.
  std::string bytes_file = file;
  bytes_file.replace(bytes_file.find("<U0"), 3, "|S0");
  expect_error([&] { npy::decode(bytes_file, "s0.npy"); }, {"s0.npy", "zero-width"});
}

TEST(Npy, WrongDtypeForInputNamesFileInputAndBothDtypes) {
  std::string path = temp_path("doubles.npy");
  npy::save(Tensor::from_vector<double>({2}, {1, 2}), path);
  expect_error([&] { npy::load_as(path, DataType::Float, "images"); },
               {"doubles.npy", "'images'", "expected float", "<f4", "found double", "<f8"});
  // Conventions apply only to their own dtype: int8 data is not a uint4 input.
  expect_error(
      [] {
        npy::convert_for_input(Tensor::zeros(DataType::Int8, {2}), DataType::UInt4, "q.npy", "q");
      },
      {"q.npy", "'q'", "expected uint4", "found int8"});
  // Sub-byte values must fit their type.
  expect_error(
      [] {
        npy::convert_for_input(Tensor::from_vector<int8_t>({2}, {3, 9}), DataType::Int4, "w.npy",
                               "w");
      },
      {"w.npy", "'w'", "int4", "element 1 is 9"});
  expect_error(
      [] {
        npy::convert_for_input(Tensor::from_vector<uint8_t>({1}, {4}), DataType::UInt2, "u.npy",
                               "u");
      },
      {"u.npy", "uint2", "element 0 is 4"});
  expect_error(
      [] {
        npy::convert_for_input(Tensor::zeros(DataType::Float, {1}), DataType::String, "s.npy", "s");
      },
      {"s.npy", "expected string", "found float"});
}

TEST(Npy, InvalidUtf8IsAnError) {
  Tensor s = Tensor::from_vector<std::string>({1}, {"\xff\xfe"});
  expect_error([&] { npy::encode(s); }, {"UTF-8"});
}

}  // namespace
}  // namespace onyx
