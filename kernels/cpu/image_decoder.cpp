// ImageDecoder (opset 20): finds the stream's format from its magic bytes, decodes it with
// the matching codec (image_codecs/) and converts the pixels to [H, W, 3] RGB or BGR, or
// [H, W, 1] grayscale, as Pillow's Image.open(...).convert(...) would.
#include <algorithm>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu {
namespace {

using image::Bytes;
using image::DecodedImage;

using namespace std::string_view_literals;

/// A format's signature: every (offset, bytes) part must match the stream.
struct Signature {
  const char* format;
  std::vector<std::pair<size_t, std::string_view>> parts;
  DecodedImage (*decode)(Bytes);

  bool matches(Bytes b) const {
    return std::all_of(parts.begin(), parts.end(), [&](const auto& part) {
      const auto& [at, magic] = part;
      return b.size() >= at + magic.size() &&
             std::equal(magic.begin(), magic.end(), b.begin() + at,
                        [](char m, uint8_t c) { return static_cast<uint8_t>(m) == c; });
    });
  }
};

const std::vector<Signature>& signatures() {
  static const std::vector<Signature> table = {
      {"JPEG", {{0, "\xFF\xD8\xFF"sv}}, image::decode_jpeg},  // SOI + the next marker
      {"PNG", {{0, "\x89PNG"sv}}, image::decode_png},
      {"BMP", {{0, "BM"sv}}, image::decode_bmp},
      {"PNM", {{0, "P1"sv}}, image::decode_pnm},  // PBM, PGM, PPM: plain P1-P3, raw P4-P6
      {"PNM", {{0, "P2"sv}}, image::decode_pnm},
      {"PNM", {{0, "P3"sv}}, image::decode_pnm},
      {"PNM", {{0, "P4"sv}}, image::decode_pnm},
      {"PNM", {{0, "P5"sv}}, image::decode_pnm},
      {"PNM", {{0, "P6"sv}}, image::decode_pnm},
      {"TIFF", {{0, "II*\0"sv}}, image::decode_tiff},  // little-endian
      {"TIFF", {{0, "MM\0*"sv}}, image::decode_tiff},  // big-endian
      {"TIFF", {{0, "II+\0"sv}}, image::decode_tiff},  // BigTIFF, which libtiff reads too
      {"TIFF", {{0, "MM\0+"sv}}, image::decode_tiff},
      {"WebP", {{0, "RIFF"sv}, {8, "WEBP"sv}}, image::decode_webp},              // RIFF size WEBP
      {"JPEG 2000", {{0, "\xFF\x4F\xFF\x51"sv}}, image::decode_jpeg2k},          // bare codestream
      {"JPEG 2000", {{0, "\0\0\0\x0CjP  \r\n\x87\n"sv}}, image::decode_jpeg2k},  // JP2 box
  };
  return table;
}

/// "JPEG, PNG, ..., JPEG 2000": the formats of signatures(), once each.
std::string format_names() {
  std::vector<std::string> names;
  for (const Signature& s : signatures())
    if (std::find(names.begin(), names.end(), s.format) == names.end()) names.push_back(s.format);
  return fmt::format("{}", fmt::join(names, ", "));
}

enum class PixelFormat { RGB, BGR, Grayscale };

// Pillow's RGB -> L rule (ITU-R 601-2 luma in 16-bit fixed point, rounded).
inline uint8_t luma(const uint8_t* p) {
  return static_cast<uint8_t>((p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16);
}

/// Writes `img` (1 to 4 channels) as `format` into `out`: alpha dropped, gray replicated
/// for RGB/BGR, color reduced to luma for Grayscale.
void convert(const DecodedImage& img, PixelFormat format, uint8_t* out) {
  const int64_t n = img.h * img.w, c = img.channels;
  const uint8_t* in = img.data.data();
  const bool color = c >= 3;
  if (format == PixelFormat::Grayscale) {
    for (int64_t i = 0; i < n; ++i, in += c) out[i] = color ? luma(in) : in[0];
    return;
  }
  const bool bgr = format == PixelFormat::BGR;
  for (int64_t i = 0; i < n; ++i, in += c, out += 3) {
    if (!color) {
      out[0] = out[1] = out[2] = in[0];
    } else {
      out[0] = in[bgr ? 2 : 0], out[1] = in[1], out[2] = in[bgr ? 0 : 2];
    }
  }
}

class ImageDecoderKernel final : public Kernel {
 public:
  explicit ImageDecoderKernel(const KernelInfo& info) {
    const std::string f = info.node.attr_string("pixel_format", "RGB");
    if (f == "RGB")
      format_ = PixelFormat::RGB;
    else if (f == "BGR")
      format_ = PixelFormat::BGR;
    else if (f == "Grayscale")
      format_ = PixelFormat::Grayscale;
    else
      ONYX_THROW("[{}] expected pixel_format RGB, BGR or Grayscale, found '{}'", info.label(), f);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.rank() == 1, "[{}] expected a 1-D encoded_stream, found shape {}", ctx.label(),
               shape_str(x.shape()));
    Bytes bytes(x.data<uint8_t>(), static_cast<size_t>(x.numel()));
    ONYX_CHECK(!bytes.empty(), "[{}] expected an encoded image, found an empty encoded_stream",
               ctx.label());
    const auto& table = signatures();
    auto sig = std::find_if(table.begin(), table.end(),
                            [&](const Signature& s) { return s.matches(bytes); });
    ONYX_CHECK(sig != table.end(),
               "[{}] expected an image stream ({}), found one starting with bytes {:02X}",
               ctx.label(), format_names(),
               fmt::join(bytes.first(std::min<size_t>(bytes.size(), 8)), " "));
    DecodedImage img;
    try {
      img = sig->decode(bytes);
    } catch (const Error& e) {
      // Codecs do not know the node: put its label where they wrote "[ImageDecoder]".
      std::string what = e.what();
      const std::string prefix = "[ImageDecoder] ";
      if (what.starts_with(prefix)) what.erase(0, prefix.size());
      ONYX_THROW("[{}] {}", ctx.label(), what);
    }
    const int64_t channels = format_ == PixelFormat::Grayscale ? 1 : 3;
    Tensor& y = ctx.allocate_output(0, DataType::UInt8, {img.h, img.w, channels});
    convert(img, format_, y.data<uint8_t>());
  }

 private:
  PixelFormat format_ = PixelFormat::RGB;
};

}  // namespace

void register_image_decoder_kernels(KernelRegistry& r) {
  r.add({"ImageDecoder",
         "",
         20,
         INT_MAX,
         "cpu",
         0,
         {DataType::UInt8},
         make_factory<ImageDecoderKernel>()});
}

}  // namespace onyx::cpu
