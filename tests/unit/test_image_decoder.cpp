// ImageDecoder: the in-house BMP and PNM decoders on hand-built streams, each pixel_format,
// the library codecs on the ONNX corpus images, and bad streams (which must throw
// onyx::Error and leave the session usable).
#include <filesystem>
#include <fstream>
#include <optional>

#include "graph/onnx_io.h"
#include "test_util.h"

using namespace onyx;
using onyx::test::attr_string;

namespace fs = std::filesystem;

namespace {

using Bytes = std::vector<uint8_t>;

Tensor stream_tensor(const Bytes& b) {
  return Tensor::from_vector<uint8_t>({static_cast<int64_t>(b.size())}, b);
}

/// A session with one ImageDecoder node over a 1-D uint8 input of any length.
Session decoder_session(const std::string& pixel_format = "RGB") {
  test::ModelBuilder b(20);
  b.input("x", DataType::UInt8, SymShape{Dim::symbol("n")});
  test::set_attrs(b.node("ImageDecoder", {"x"}, {"y"}),
                  {attr_string("pixel_format", pixel_format)});
  b.output("y");
  return b.session();
}

Tensor decode(const Bytes& b, const std::string& pixel_format = "RGB") {
  return decoder_session(pixel_format).run({{"x", stream_tensor(b)}}).at("y");
}

Bytes pixels(const Tensor& t) {
  const uint8_t* p = t.data<uint8_t>();
  return Bytes(p, p + t.numel());
}

/// The message of the onyx::Error that `fn` throws ("" when it throws none).
template <typename F>
std::string error_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

void put16(Bytes& b, size_t at, uint32_t v) { b[at] = v & 0xFF, b[at + 1] = (v >> 8) & 0xFF; }
void put32(Bytes& b, size_t at, uint32_t v) { put16(b, at, v & 0xFFFF), put16(b, at + 2, v >> 16); }

/// A BMP: file header, a `header`-byte DIB header (40, or 124 for V5), `extra` bytes after it
/// (BI_BITFIELDS masks for a 40-byte header, or a BGRX palette), then `rows` in file order,
/// each padded to 4 bytes. A negative height stores the top row first.
Bytes make_bmp(int32_t w, int32_t h, uint16_t bpp, const std::vector<Bytes>& rows,
               const Bytes& extra = {}, uint32_t compression = 0, uint32_t header = 40,
               uint32_t colors = 0) {
  const size_t pixels_at = 14 + header + extra.size();
  Bytes b(pixels_at);
  b[0] = 'B', b[1] = 'M';
  put32(b, 10, static_cast<uint32_t>(pixels_at));
  put32(b, 14, header);
  put32(b, 18, static_cast<uint32_t>(w));
  put32(b, 22, static_cast<uint32_t>(h));
  put16(b, 26, 1);
  put16(b, 28, bpp);
  put32(b, 30, compression);
  put32(b, 46, colors);
  std::copy(extra.begin(), extra.end(), b.begin() + 14 + header);
  for (Bytes row : rows) {
    row.resize((row.size() + 3) / 4 * 4);
    b.insert(b.end(), row.begin(), row.end());
  }
  put32(b, 2, static_cast<uint32_t>(b.size()));
  return b;
}

Bytes text(const std::string& s) { return Bytes(s.begin(), s.end()); }

// Pillow's luma rule, for expected grayscale values.
uint8_t luma(int r, int g, int b) { return (r * 19595 + g * 38470 + b * 7471 + 0x8000) >> 16; }

// A 2x2 24-bit BMP stored bottom-up: top row red, green; bottom row blue, white.
const Bytes kBmp24 = make_bmp(2, 2, 24, {{255, 0, 0, 255, 255, 255}, {0, 0, 255, 0, 255, 0}});
const Bytes kRgb2x2 = {255, 0, 0, 0, 255, 0, 0, 0, 255, 255, 255, 255};

TEST(ImageDecoderBmp, TwentyFourBitBottomUp) {
  Tensor y = decode(kBmp24);
  EXPECT_EQ(y.dtype(), DataType::UInt8);
  EXPECT_EQ(y.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(pixels(y), kRgb2x2);
}

TEST(ImageDecoderBmp, TopDownRowsKeepTheirOrder) {
  Bytes top_down = make_bmp(2, -2, 24, {{0, 0, 255, 0, 255, 0}, {255, 0, 0, 255, 255, 255}});
  EXPECT_EQ(pixels(decode(top_down)), kRgb2x2);
}

TEST(ImageDecoderBmp, EightBitPalette) {
  // Three BGRX colors (red, green, blue); pixels 2, 0, 1 on one row.
  Bytes palette = {0, 0, 255, 0, 0, 255, 0, 0, 255, 0, 0, 0};
  Bytes bmp = make_bmp(3, 1, 8, {{2, 0, 1}}, palette, 0, 40, 3);
  Tensor y = decode(bmp);
  EXPECT_EQ(y.shape(), (Shape{1, 3, 3}));
  EXPECT_EQ(pixels(y), (Bytes{0, 0, 255, 255, 0, 0, 0, 255, 0}));
  EXPECT_EQ(pixels(decode(bmp, "Grayscale")),
            (Bytes{luma(0, 0, 255), luma(255, 0, 0), luma(0, 255, 0)}));
}

TEST(ImageDecoderBmp, OneAndFourBitPalettes) {
  Bytes bw = {0, 0, 0, 0, 255, 255, 255, 0};  // index 0 black, 1 white
  // 10 pixels from the high bits: 1011000001 -> white black white white black...
  Tensor y = decode(make_bmp(10, 1, 1, {{0b10110000, 0b01000000}}, bw), "Grayscale");
  EXPECT_EQ(pixels(y), (Bytes{255, 0, 255, 255, 0, 0, 0, 0, 0, 255}));
  Bytes four = bw;
  four.insert(four.end(), {10, 20, 30, 0});  // index 2
  y = decode(make_bmp(3, 1, 4, {{0x21, 0x00}}, four, 0, 40, 3));
  EXPECT_EQ(pixels(y), (Bytes{30, 20, 10, 255, 255, 255, 0, 0, 0}));
}

TEST(ImageDecoderBmp, BitfieldsInAV5Header) {
  // 16-bit 5-6-5 masks inside a 124-byte header; fields scale by v * 255 / max (Pillow).
  Bytes b = make_bmp(3, 1, 16, {{0x00, 0xF8, 0xE0, 0x07, 0x10, 0x00}}, {}, 3, 124);
  put32(b, 54, 0xF800), put32(b, 58, 0x07E0), put32(b, 62, 0x001F);
  EXPECT_EQ(pixels(decode(b)), (Bytes{255, 0, 0, 0, 255, 0, 0, 0, 16 * 255 / 31}));
}

TEST(ImageDecoderBmp, ThirtyTwoBitBitfieldsAfterAnInfoHeader) {
  Bytes masks(12);
  put32(masks, 0, 0x0000FF00), put32(masks, 4, 0x00FF0000), put32(masks, 8, 0xFF000000);
  Bytes b = make_bmp(1, 1, 32, {{0x00, 0x11, 0x22, 0x33}}, masks, 3);
  EXPECT_EQ(pixels(decode(b)), (Bytes{0x11, 0x22, 0x33}));
}

TEST(ImageDecoderFormats, RgbBgrAndGrayscale) {
  Tensor bgr = decode(kBmp24, "BGR");
  EXPECT_EQ(bgr.shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(pixels(bgr), (Bytes{0, 0, 255, 0, 255, 0, 255, 0, 0, 255, 255, 255}));
  Tensor gray = decode(kBmp24, "Grayscale");
  EXPECT_EQ(gray.shape(), (Shape{2, 2, 1}));
  EXPECT_EQ(pixels(gray), (Bytes{76, 150, 29, 255}));  // PIL's convert("L") values
  EXPECT_EQ(luma(255, 0, 0), 76);
}

TEST(ImageDecoderFormats, UnknownPixelFormatFailsAtSessionCreation) {
  std::string msg = error_of([] { decoder_session("HSV"); });
  EXPECT_NE(msg.find("expected pixel_format RGB, BGR or Grayscale, found 'HSV'"), std::string::npos)
      << msg;
}

TEST(ImageDecoderPnm, PlainPpmWithComments) {
  Tensor y = decode(text("P3\n# made by hand\n2 1 # width height\n255\n255 0 0 # red\n 0 0 255\n"));
  EXPECT_EQ(y.shape(), (Shape{1, 2, 3}));
  EXPECT_EQ(pixels(y), (Bytes{255, 0, 0, 0, 0, 255}));
}

TEST(ImageDecoderPnm, RawPpmWithSixteenBitSamples) {
  // maxval 65535: big-endian samples scaled by round(v / 65535 * 255).
  Bytes b = text("P6 2 1 65535\n");
  b.insert(b.end(), {0xFF, 0xFF, 0x80, 0x00, 0x00, 0x00, 0x01, 0x01, 0x00, 0x00, 0x7F, 0xFF});
  EXPECT_EQ(pixels(decode(b)), (Bytes{255, 128, 0, 1, 0, 127}));
}

TEST(ImageDecoderPnm, RawPpmWithMaxval1000) {
  // round(500 / 1000 * 255) = round(127.5) = 128 (half to even), round(4 * 0.255) = 1.
  Bytes b = text("P6\n1 1\n1000\n");
  b.insert(b.end(), {0x03, 0xE8, 0x01, 0xF4, 0x00, 0x04});
  EXPECT_EQ(pixels(decode(b)), (Bytes{255, 128, 1}));
}

TEST(ImageDecoderPnm, GraymapsReplicateForRgb) {
  Bytes b = text("P5 2 1 255\n");
  b.insert(b.end(), {7, 200});
  EXPECT_EQ(pixels(decode(b)), (Bytes{7, 7, 7, 200, 200, 200}));
  EXPECT_EQ(pixels(decode(b, "Grayscale")), (Bytes{7, 200}));
  EXPECT_EQ(pixels(decode(text("P2 2 1 15 15 5"), "Grayscale")), (Bytes{255, 85}));
}

TEST(ImageDecoderPnm, PlainBitmapOneIsBlack) {
  // Samples need no separators in P1; comments may sit between them.
  Tensor y = decode(text("P1\n# c\n3 2\n1 0 1\n01# c\n0\n"), "Grayscale");
  EXPECT_EQ(y.shape(), (Shape{2, 3, 1}));
  EXPECT_EQ(pixels(y), (Bytes{0, 255, 0, 255, 0, 255}));
  EXPECT_EQ(pixels(decode(text("P1 1 1 1"))), (Bytes{0, 0, 0}));
}

TEST(ImageDecoderPnm, RawBitmapRowsArePaddedToBytes) {
  Bytes b = text("P4\n10 2\n");
  b.insert(b.end(), {0b10100000, 0b01000000, 0xFF, 0xC0});
  Tensor y = decode(b, "Grayscale");
  EXPECT_EQ(y.shape(), (Shape{2, 10, 1}));
  Bytes want = {0, 255, 0, 255, 255, 255, 255, 255, 255, 0};
  want.insert(want.end(), 10, 0);
  EXPECT_EQ(pixels(y), want);
}

// ---- Library codecs, on the ONNX corpus images ----------------------------------------

struct CorpusCase {
  Tensor stream, want;
  std::string model;
};

/// The corpus case test_image_decoder_decode_<name>; skips the test when it is missing.
std::optional<CorpusCase> corpus_case(const std::string& name) {
  fs::path dir = fs::path(test::corpus_dir()) / "node" / ("test_image_decoder_decode_" + name);
  if (!fs::exists(dir / "model.onnx")) return std::nullopt;
  return CorpusCase{load_tensor_pb((dir / "test_data_set_0" / "input_0.pb").string()),
                    load_tensor_pb((dir / "test_data_set_0" / "output_0.pb").string()),
                    (dir / "model.onnx").string()};
}

class ImageDecoderCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(ImageDecoderCorpus, MatchesPillow) {
  auto c = corpus_case(GetParam());
  if (!c) GTEST_SKIP() << "no ONNX corpus at " << test::corpus_dir();
  Session s(c->model);
  Tensor got;
  std::string msg = error_of([&] {
    got = s.run({{s.inputs().at(0).name, c->stream}}).at(s.outputs().at(0).name);
  });
  if (msg.find("built without") != std::string::npos) GTEST_SKIP() << msg;
  ASSERT_EQ(msg, "");
  EXPECT_EQ(got.shape(), c->want.shape());
  EXPECT_EQ(pixels(got), pixels(c->want));
}

INSTANTIATE_TEST_SUITE_P(AllFormats, ImageDecoderCorpus,
                         ::testing::Values("bmp_rgb", "jpeg2k_rgb", "jpeg_bgr", "jpeg_grayscale",
                                           "jpeg_rgb", "png_rgb", "pnm_rgb", "tiff_rgb",
                                           "webp_rgb"));

// BGR is RGB reversed and Grayscale is the luma of RGB, for every library codec.
TEST(ImageDecoderFormats, LibraryCodecsAgreeAcrossPixelFormats) {
  for (const char* name : {"jpeg_rgb", "png_rgb", "webp_rgb", "tiff_rgb", "jpeg2k_rgb"}) {
    auto c = corpus_case(name);
    if (!c) GTEST_SKIP() << "no ONNX corpus at " << test::corpus_dir();
    Bytes in = pixels(c->stream);
    Tensor rgb, bgr, gray;
    std::string msg = error_of(
        [&] { rgb = decode(in), bgr = decode(in, "BGR"), gray = decode(in, "Grayscale"); });
    if (msg.find("built without") != std::string::npos) continue;
    ASSERT_EQ(msg, "") << name;
    Bytes p = pixels(rgb), q = pixels(bgr), g = pixels(gray);
    ASSERT_EQ(q.size(), p.size());
    ASSERT_EQ(g.size() * 3, p.size());
    for (size_t i = 0; i < g.size(); ++i) {
      EXPECT_EQ(q[3 * i], p[3 * i + 2]) << name << " pixel " << i;
      EXPECT_EQ(g[i], luma(p[3 * i], p[3 * i + 1], p[3 * i + 2])) << name << " pixel " << i;
    }
  }
}

// ---- Bad streams ------------------------------------------------------------------------

TEST(ImageDecoderErrors, BadStreamsThrowAndTheSessionStaysUsable) {
  Session s = decoder_session();
  auto run = [&](const Bytes& b) { return s.run({{"x", stream_tensor(b)}}).at("y"); };
  auto expect_error = [&](const Bytes& b, const std::string& part) {
    std::string msg = error_of([&] { run(b); });
    EXPECT_NE(msg.find(part), std::string::npos) << "message: " << msg;
    EXPECT_EQ(msg.rfind("[ImageDecoder node", 0), 0u) << msg;
  };
  expect_error({}, "found an empty encoded_stream");
  expect_error(text("GIF89a..."),
               "expected an image stream (JPEG, PNG, BMP, PNM, TIFF, WebP, JPEG 2000), found one "
               "starting with bytes 47 49 46 38 39 61 2E 2E");
  // A BMP whose header claims 100x100 pixels over a 12-byte raster.
  Bytes short_bmp = make_bmp(2, 2, 24, {{1, 2, 3, 4, 5, 6}, {7, 8, 9, 10, 11, 12}});
  put32(short_bmp, 18, 100), put32(short_bmp, 22, 100);
  expect_error(short_bmp, "truncated BMP");
  // Headers claiming a huge image are refused before anything that size is allocated.
  expect_error(text("P6 100000 100000 255\n"), "expected at most 2147483648 decoded bytes");
  expect_error(text("P6 1000 1000 255\n\x01\x02"), "truncated PNM");
  expect_error(text("P3 1 1 255\n1 2 300"), "expected samples <= maxval 255, found 300");
  expect_error(text("P6 2 2"), "expected a number for the maxval");
  Bytes png = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13, 'I', 'H', 'D', 'R', 0, 0};
  std::string png_msg = error_of([&] { run(png); });
  if (png_msg.find("built without") == std::string::npos) expect_error(png, "PNG: ");
  if (auto c = corpus_case("jpeg_rgb")) {
    Bytes jpeg = pixels(c->stream);
    std::string jpeg_msg = error_of([&] { run(Bytes(jpeg.begin(), jpeg.begin() + 20)); });
    if (jpeg_msg.find("built without") == std::string::npos) {
      expect_error(Bytes(jpeg.begin(), jpeg.begin() + 20), "JPEG: ");
      // Cut inside the entropy-coded data: libjpeg would pad it; we refuse it like Pillow.
      expect_error(Bytes(jpeg.begin(), jpeg.end() - 100), "JPEG: Premature end of JPEG file");
    }
  }
  // Still usable: a good stream decodes after all the failures.
  EXPECT_EQ(pixels(run(kBmp24)), kRgb2x2);
}

TEST(ImageDecoderErrors, WrongRankIsRefused) {
  test::ModelBuilder b(20);
  b.input("x", DataType::UInt8, Shape{1, 3});
  b.node("ImageDecoder", {"x"}, {"y"});
  b.output("y");
  Session s = b.session();
  std::string msg = error_of([&] {
    s.run({{"x", Tensor::from_vector<uint8_t>({1, 3}, {1, 2, 3})}});
  });
  EXPECT_NE(msg.find("expected a 1-D encoded_stream, found shape"), std::string::npos) << msg;
}

}  // namespace
