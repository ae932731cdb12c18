// The image codecs behind ImageDecoder: one function per encoded format, each turning a
// whole stream into 8-bit interleaved pixels. Library-backed codecs (JPEG, PNG, WebP, TIFF,
// JPEG 2000) are built from <codec>.cpp when CMake finds the library and from
// <codec>_none.cpp, which throws "built without ...", when it does not; BMP and PNM are
// in-house. Every codec throws onyx::Error "[ImageDecoder] <format>: ..." on bad input.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "graph/error.h"

namespace onyx::cpu::image {

using Bytes = std::span<const uint8_t>;

/// Decoded pixels: 8 bits per sample, rows top to bottom, samples interleaved; channels is
/// 1 (gray), 2 (gray + alpha), 3 (RGB) or 4 (RGBA).
struct DecodedImage {
  int64_t h = 0, w = 0, channels = 0;
  std::vector<uint8_t> data;
};

/// Largest decoded image accepted (bytes), so a hostile header cannot exhaust memory.
inline constexpr int64_t kMaxDecodedBytes = int64_t{1} << 31;

/// Checks that h x w x channels is a plausible image (positive, at most kMaxDecodedBytes)
/// and returns its size in bytes; `format` names the codec in the error.
inline int64_t checked_image_bytes(int64_t h, int64_t w, int64_t channels, const char* format) {
  ONYX_CHECK(h > 0 && w > 0, "[ImageDecoder] {}: expected a positive image size, found {}x{}",
             format, w, h);
  // Divisions, not a product, so huge header values cannot overflow the check itself.
  ONYX_CHECK(w <= kMaxDecodedBytes / h / channels,
             "[ImageDecoder] {}: expected at most {} decoded bytes, found a {}x{} image with {} "
             "channels",
             format, kMaxDecodedBytes, w, h, channels);
  return h * w * channels;
}

/// A zero-filled image of the given size, checked by checked_image_bytes.
inline DecodedImage allocate_image(int64_t h, int64_t w, int64_t channels, const char* format) {
  int64_t n = checked_image_bytes(h, w, channels, format);
  return DecodedImage{h, w, channels, std::vector<uint8_t>(static_cast<size_t>(n))};
}

DecodedImage decode_jpeg(Bytes stream);    // jpeg.cpp: libjpeg-turbo
DecodedImage decode_png(Bytes stream);     // png.cpp: libpng
DecodedImage decode_webp(Bytes stream);    // webp.cpp: libwebp
DecodedImage decode_tiff(Bytes stream);    // tiff.cpp: libtiff
DecodedImage decode_jpeg2k(Bytes stream);  // jpeg2k.cpp: OpenJPEG (J2K codestream or JP2)
DecodedImage decode_bmp(Bytes stream);     // bmp.cpp: in-house
DecodedImage decode_pnm(Bytes stream);     // pnm.cpp: in-house (P1..P6)

}  // namespace onyx::cpu::image
