// PNM (P1..P6: PBM, PGM, PPM; plain ASCII and raw), in-house. Follows Pillow's
// PpmImagePlugin: bitmaps give 0 for black (1 bits) and 255 for white, samples of a maxval
// other than 255 are scaled by round(v / maxval * 255) (16-bit big-endian when maxval > 255),
// and '#' comments may appear between header tokens and between plain samples.
#include <cmath>

#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu::image {
namespace {

bool is_space(uint8_t c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f';
}
bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }

class Reader {
 public:
  explicit Reader(Bytes b) : b_(b) {}
  size_t pos() const { return pos_; }
  size_t left() const { return b_.size() - pos_; }
  const uint8_t* here() const { return b_.data() + pos_; }
  void advance(size_t n) { pos_ += n; }

  /// Skips whitespace and comments (a '#' to the end of its line).
  void skip_blank() {
    while (pos_ < b_.size()) {
      if (b_[pos_] == '#') {
        while (pos_ < b_.size() && b_[pos_] != '\n' && b_[pos_] != '\r') ++pos_;
      } else if (is_space(b_[pos_])) {
        ++pos_;
      } else {
        return;
      }
    }
  }
  /// The next decimal number (after blanks), at most 10 digits; `one_digit` for P1 bitmap
  /// samples, which need no separators ("0110").
  int64_t number(const char* what, bool one_digit = false) {
    skip_blank();
    ONYX_CHECK(pos_ < b_.size() && is_digit(b_[pos_]),
               "[ImageDecoder] PNM: expected a number for the {} at byte {}, found {}", what, pos_,
               pos_ < b_.size() ? fmt::format("'{}'", static_cast<char>(b_[pos_])) : "the end");
    if (one_digit) return b_[pos_++] - '0';
    int64_t v = 0;
    for (int n = 0; n < 10 && pos_ < b_.size() && is_digit(b_[pos_]); ++n)
      v = v * 10 + (b_[pos_++] - '0');
    ONYX_CHECK(pos_ >= b_.size() || !is_digit(b_[pos_]),
               "[ImageDecoder] PNM: expected at most 10 digits for the {} at byte {}", what, pos_);
    return v;
  }

 private:
  Bytes b_;
  size_t pos_ = 2;  // after the magic
};

/// Maps samples 0..maxval to 0..255 as Pillow does (Python's round: half to even).
std::vector<uint8_t> scale_table(int64_t maxval) {
  std::vector<uint8_t> t(static_cast<size_t>(maxval) + 1);
  for (int64_t v = 0; v <= maxval; ++v)
    t[v] = static_cast<uint8_t>(
        std::nearbyint(static_cast<double>(v) / static_cast<double>(maxval) * 255.0));
  return t;
}

}  // namespace

DecodedImage decode_pnm(Bytes b) {
  ONYX_CHECK(b.size() >= 2 && b[0] == 'P' && b[1] >= '1' && b[1] <= '6',
             "[ImageDecoder] PNM: expected a P1..P6 magic number");
  const int kind = b[1] - '0';
  const bool plain = kind <= 3, bitmap = kind == 1 || kind == 4;
  const int64_t channels = kind == 3 || kind == 6 ? 3 : 1;
  Reader r(b);
  const int64_t w = r.number("width"), h = r.number("height");
  const int64_t maxval = bitmap ? 1 : r.number("maxval");
  ONYX_CHECK(maxval >= 1 && maxval <= 65535,
             "[ImageDecoder] PNM: expected a maxval in 1..65535, found {}", maxval);
  const int64_t samples = checked_image_bytes(h, w, channels, "PNM");

  if (plain) {
    // Each plain sample takes at least one byte: reject a short stream before allocating.
    ONYX_CHECK(samples <= static_cast<int64_t>(r.left()),
               "[ImageDecoder] PNM: the header claims {}x{}x{} samples but only {} bytes follow "
               "(truncated PNM)",
               w, h, channels, r.left());
    DecodedImage img = allocate_image(h, w, channels, "PNM");
    const std::vector<uint8_t> scale = scale_table(maxval);
    for (uint8_t& out : img.data) {
      int64_t v = r.number("sample", bitmap);
      ONYX_CHECK(v <= maxval, "[ImageDecoder] PNM: expected samples <= maxval {}, found {}", maxval,
                 v);
      out = bitmap ? (v ? 0 : 255) : scale[v];
    }
    return img;
  }

  // Raw: one whitespace byte ends the header, then rows (bitmaps: 1 bit per pixel, rows
  // padded to whole bytes; others: 1 byte per sample, 2 big-endian when maxval > 255).
  ONYX_CHECK(r.left() > 0 && is_space(*r.here()),
             "[ImageDecoder] PNM: expected one whitespace byte after the header at byte {}",
             r.pos());
  r.advance(1);
  const int64_t sample_bytes = maxval > 255 ? 2 : 1;
  const int64_t need = bitmap ? (w + 7) / 8 * h : samples * sample_bytes;
  ONYX_CHECK(need <= static_cast<int64_t>(r.left()),
             "[ImageDecoder] PNM: the header claims {}x{}x{} samples ({} bytes) but only {} bytes "
             "follow (truncated PNM)",
             w, h, channels, need, r.left());
  DecodedImage img = allocate_image(h, w, channels, "PNM");
  const uint8_t* in = r.here();
  if (bitmap) {
    for (int64_t y = 0; y < h; ++y, in += (w + 7) / 8)
      for (int64_t x = 0; x < w; ++x)
        img.data[y * w + x] = (in[x / 8] >> (7 - x % 8)) & 1 ? 0 : 255;
  } else if (maxval == 255) {
    std::copy(in, in + samples, img.data.begin());
  } else {
    const std::vector<uint8_t> scale = scale_table(maxval);
    for (int64_t i = 0; i < samples; ++i, in += sample_bytes) {
      int64_t v = sample_bytes == 2 ? in[0] << 8 | in[1] : in[0];
      img.data[i] = v > maxval ? 255 : scale[v];  // Pillow clips samples over maxval
    }
  }
  return img;
}

}  // namespace onyx::cpu::image
