// BMP, in-house (Debian has no maintained BMP library): OS/2 core, BITMAPINFOHEADER and its
// V2..V5 extensions; 1/4/8-bit palettes, 16/24/32-bit direct color, BI_BITFIELDS masks;
// bottom-up and top-down rows. RLE compression is not supported. Every read is bounds-checked
// against the stream before anything is allocated.
#include <bit>
#include <string>

#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu::image {
namespace {

enum Compression : uint32_t { kRgb = 0, kRle8 = 1, kRle4 = 2, kBitfields = 3, kAlphaBitfields = 6 };

uint32_t u16(Bytes b, size_t at) { return b[at] | b[at + 1] << 8; }
uint32_t u32(Bytes b, size_t at) { return u16(b, at) | u16(b, at + 2) << 16; }

/// One channel of a direct-color pixel: its mask, and how to scale it to 8 bits.
struct Field {
  uint32_t mask = 0;
  int shift = 0;
  uint32_t max = 0;  // mask >> shift
  explicit Field(uint32_t m) : mask(m), shift(m ? std::countr_zero(m) : 0), max(m >> shift) {}
  // Pillow's unpackers scale n-bit fields by v * 255 / (2^n - 1), truncating.
  uint8_t get(uint32_t px) const {
    return max ? static_cast<uint8_t>(((px & mask) >> shift) * 255ull / max) : 0;
  }
};

}  // namespace

DecodedImage decode_bmp(Bytes b) {
  auto need = [&](size_t end, const char* what) {
    ONYX_CHECK(end <= b.size(),
               "[ImageDecoder] BMP: expected {} bytes for the {}, found a {}-byte "
               "stream (truncated BMP)",
               end, what, b.size());
  };
  need(18, "file header");
  const size_t pixels_at = u32(b, 10), header = u32(b, 14);
  // OS/2 core (12), BITMAPINFOHEADER (40), its V2/V3 (52, 56) and V4/V5 (108, 124)
  // extensions, and OS/2 v2 (64), read as an info header.
  ONYX_CHECK(header == 12 || header == 40 || header == 52 || header == 56 || header == 64 ||
                 header == 108 || header == 124,
             "[ImageDecoder] BMP: expected a DIB header of 12, 40, 52, 56, 64, 108 or 124 bytes, "
             "found {}",
             header);
  need(14 + header, "DIB header");
  int64_t w, h;
  uint32_t bpp, compression = kRgb, colors = 0;
  if (header == 12) {  // OS/2 BITMAPCOREHEADER: 16-bit sizes, 3-byte palette entries
    w = u16(b, 18), h = u16(b, 20), bpp = u16(b, 24);
  } else {
    w = static_cast<int32_t>(u32(b, 18)), h = static_cast<int32_t>(u32(b, 22));
    bpp = u16(b, 28), compression = u32(b, 30), colors = u32(b, 46);
  }
  const bool top_down = h < 0;  // a negative height stores the top row first
  h = top_down ? -h : h;
  ONYX_CHECK(compression == kRgb || compression == kBitfields || compression == kAlphaBitfields,
             "[ImageDecoder] BMP: expected uncompressed or BI_BITFIELDS pixels, found compression "
             "{}{}",
             compression,
             compression == kRle8 || compression == kRle4 ? " (RLE, not supported)" : "");
  ONYX_CHECK(bpp == 1 || bpp == 4 || bpp == 8 || bpp == 16 || bpp == 24 || bpp == 32,
             "[ImageDecoder] BMP: expected 1, 4, 8, 16, 24 or 32 bits per pixel, found {}", bpp);

  // Direct-color masks: inside V2+ headers, else right after the header (BI_BITFIELDS);
  // without BI_BITFIELDS the defaults are 5-5-5 (16-bit) and 8-8-8 (24/32-bit, alpha unused).
  size_t after_header = 14 + header;
  uint32_t masks[3] = {0xFF0000, 0xFF00, 0xFF};
  if (bpp == 16) masks[0] = 0x7C00, masks[1] = 0x3E0, masks[2] = 0x1F;
  if (compression != kRgb) {
    ONYX_CHECK(bpp == 16 || bpp == 32,
               "[ImageDecoder] BMP: expected BI_BITFIELDS with 16 or 32 bits per pixel, found {}",
               bpp);
    const bool in_header = header != 40 && header != 64;  // V2+: R, G, B at file offset 54
    const size_t at = in_header ? 54 : after_header;
    if (!in_header) after_header += compression == kAlphaBitfields ? 16 : 12;
    need(at + 12, "color masks");
    for (int c = 0; c < 3; ++c) masks[c] = u32(b, at + 4 * c);
  }
  const Field fields[3] = {Field(masks[0]), Field(masks[1]), Field(masks[2])};

  // Palette (1/4/8-bit): biClrUsed entries, or 2^bpp when 0; BGR(X) each.
  std::vector<uint8_t> palette;  // RGB triples
  if (bpp <= 8) {
    const size_t entry = header == 12 ? 3 : 4;
    size_t count = colors ? colors : size_t{1} << bpp;
    ONYX_CHECK(count <= 256, "[ImageDecoder] BMP: expected at most 256 palette colors, found {}",
               count);
    need(after_header + count * entry, "palette");
    // Indices past the palette read black, as a 256-entry zero-padded palette would give.
    palette.assign(3 * 256, 0);
    for (size_t i = 0; i < count; ++i)
      for (int c = 0; c < 3; ++c) palette[3 * i + c] = b[after_header + i * entry + 2 - c];
  }

  // Rows are padded to 4 bytes; the last one need not be (some writers drop that padding).
  // checked_image_bytes bounds w and h first, so these products cannot overflow.
  checked_image_bytes(h, w, 3, "BMP");
  const size_t stride = (static_cast<size_t>(w) * bpp + 31) / 32 * 4;
  const size_t row_bytes = (static_cast<size_t>(w) * bpp + 7) / 8;
  const size_t pixel_bytes = stride * static_cast<size_t>(h - 1) + row_bytes;
  ONYX_CHECK(pixels_at <= b.size() && b.size() - pixels_at >= pixel_bytes,
             "[ImageDecoder] BMP: the header claims {}x{} pixels at {} bits ({} bytes from offset "
             "{}), but the stream holds {} bytes (truncated BMP)",
             w, h, bpp, pixel_bytes, pixels_at, b.size());

  DecodedImage img = allocate_image(h, w, 3, "BMP");
  for (int64_t y = 0; y < h; ++y) {
    const size_t row = pixels_at + stride * static_cast<size_t>(top_down ? y : h - 1 - y);
    uint8_t* out = img.data.data() + y * w * 3;
    for (size_t x = 0; x < static_cast<size_t>(w); ++x, out += 3) {
      if (bpp <= 8) {
        const size_t bit = x * bpp;  // pixels are packed from the high bits of each byte
        const uint32_t idx = (b[row + bit / 8] >> (8 - bpp - bit % 8)) & ((1u << bpp) - 1);
        for (int c = 0; c < 3; ++c) out[c] = palette[3 * idx + c];
      } else if (bpp == 24) {  // BGR
        for (int c = 0; c < 3; ++c) out[c] = b[row + 3 * x + 2 - c];
      } else {
        const uint32_t px = bpp == 16 ? u16(b, row + 2 * x) : u32(b, row + 4 * x);
        for (int c = 0; c < 3; ++c) out[c] = fields[c].get(px);
      }
    }
  }
  return img;
}

}  // namespace onyx::cpu::image
