// PNG through libpng. libpng reports errors through an error function that must not return:
// ours records the message and longjmps back to the setjmp in read_info()/read_pixels(),
// which hold no object with a destructor; the C++ caller throws after they return.
#include <png.h>

#include <cstdio>
#include <cstring>

#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu::image {
namespace {

/// The stream libpng reads from, and the last error message.
struct Source {
  const uint8_t* data;
  size_t size;
  size_t pos;
  char message[256];
};

void fail(png_structp png, png_const_charp msg) {
  auto* src = static_cast<Source*>(png_get_error_ptr(png));
  std::snprintf(src->message, sizeof src->message, "%s", msg);
  png_longjmp(png, 1);
}

void ignore_warning(png_structp, png_const_charp) {}

void read_bytes(png_structp png, png_bytep out, size_t n) {
  auto* src = static_cast<Source*>(png_get_io_ptr(png));
  if (n > src->size - src->pos) png_error(png, "the stream ends inside the image (truncated PNG)");
  std::memcpy(out, src->data + src->pos, n);
  src->pos += n;
}

/// libpng's structs, freed however decoding ended.
struct Decoder {
  Source src;
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~Decoder() {
    if (png) png_destroy_read_struct(&png, info ? &info : nullptr, nullptr);
  }
};

// Reads the chunks before the pixels and asks libpng for 8-bit gray, gray+alpha, RGB or
// RGBA rows: palettes expanded, low-bit gray widened, 16-bit cut to its high byte (as
// Pillow's RGB;16B unpacker does). No gamma correction, as in Pillow. False on error.
bool read_info(Decoder* d) {
  if (setjmp(png_jmpbuf(d->png))) return false;
  png_set_read_fn(d->png, &d->src, read_bytes);
  png_read_info(d->png, d->info);
  int color = png_get_color_type(d->png, d->info);
  int depth = png_get_bit_depth(d->png, d->info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(d->png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(d->png);
  if (depth == 16) png_set_strip_16(d->png);
  png_set_interlace_handling(d->png);
  png_read_update_info(d->png, d->info);
  return true;
}

bool read_pixels(Decoder* d, png_bytepp rows) {
  if (setjmp(png_jmpbuf(d->png))) return false;
  png_read_image(d->png, rows);
  return true;
}

}  // namespace

DecodedImage decode_png(Bytes stream) {
  Decoder d{};
  d.src = Source{stream.data(), stream.size(), 0, {}};
  d.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &d.src, fail, ignore_warning);
  if (d.png) d.info = png_create_info_struct(d.png);
  ONYX_CHECK(d.png && d.info, "[ImageDecoder] PNG: libpng could not allocate its decoder");
  if (!read_info(&d)) ONYX_THROW("[ImageDecoder] PNG: {}", d.src.message);
  DecodedImage img =
      allocate_image(png_get_image_height(d.png, d.info), png_get_image_width(d.png, d.info),
                     png_get_channels(d.png, d.info), "PNG");
  // After the transforms every row is width x channels bytes; anything else would overrun.
  ONYX_CHECK(png_get_rowbytes(d.png, d.info) == static_cast<size_t>(img.w * img.channels),
             "[ImageDecoder] PNG: expected rows of {} bytes, found {}", img.w * img.channels,
             png_get_rowbytes(d.png, d.info));
  std::vector<png_bytep> rows(static_cast<size_t>(img.h));
  for (int64_t y = 0; y < img.h; ++y) rows[y] = img.data.data() + y * img.w * img.channels;
  if (!read_pixels(&d, rows.data())) ONYX_THROW("[ImageDecoder] PNG: {}", d.src.message);
  return img;
}

}  // namespace onyx::cpu::image
