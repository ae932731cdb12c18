// JPEG through libjpeg-turbo with its defaults (JDCT_ISLOW, fancy upsampling), as Pillow
// decodes. libjpeg reports errors by calling error_exit, which must not return: ours longjmps
// back to the setjmp in read_header()/read_pixels(). Those two functions hold no object with
// a destructor, and the C++ caller throws after they return.
#include <csetjmp>
#include <cstring>

// jpeglib.h uses size_t and FILE without including what declares them: <cstdio> goes first.
// clang-format off
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu::image {
namespace {

struct ErrorManager {
  jpeg_error_mgr pub;  // first, so libjpeg's cinfo->err points at the whole struct
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX];
};

void fail(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<ErrorManager*>(cinfo->err);
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

// libjpeg pads a stream that ends early with fake data and only warns; Pillow refuses
// truncated images, so a premature end is an error here too. Other warnings pass silently.
void warn(j_common_ptr cinfo, int level) {
  if (level < 0 && cinfo->err->msg_code == JWRN_JPEG_EOF) fail(cinfo);
}

/// A decompressor whose destructor releases libjpeg's memory however decoding ended.
struct Decoder {
  jpeg_decompress_struct cinfo;
  ErrorManager err;
  bool created = false;
  bool cmyk = false;
  ~Decoder() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

// Reads the header and picks the output color space: gray stays gray, CMYK/YCCK come out as
// CMYK (converted below), everything else as RGB. False on error (message in d->err).
bool read_header(Decoder* d, const uint8_t* data, unsigned long size) {
  d->cinfo.err = jpeg_std_error(&d->err.pub);
  d->err.pub.error_exit = fail;
  d->err.pub.emit_message = warn;
  if (setjmp(d->err.jump)) return false;
  jpeg_create_decompress(&d->cinfo);
  d->created = true;
  // Caps libjpeg's own buffers (progressive images keep all coefficients in memory).
  d->cinfo.mem->max_memory_to_use = 2 * kMaxDecodedBytes;
  jpeg_mem_src(&d->cinfo, data, size);
  jpeg_read_header(&d->cinfo, TRUE);
  J_COLOR_SPACE in = d->cinfo.jpeg_color_space;
  d->cmyk = in == JCS_CMYK || in == JCS_YCCK;
  d->cinfo.out_color_space = in == JCS_GRAYSCALE ? JCS_GRAYSCALE : d->cmyk ? JCS_CMYK : JCS_RGB;
  jpeg_calc_output_dimensions(&d->cinfo);
  return true;
}

// Decodes every scanline into `out` (output_height rows of row_bytes). False on error. No
// jpeg_finish_decompress: once the pixels are in, a missing EOI marker is no error (as in
// Pillow), and jpeg_destroy_decompress frees the rest.
bool read_pixels(Decoder* d, uint8_t* out, size_t row_bytes) {
  if (setjmp(d->err.jump)) return false;
  jpeg_start_decompress(&d->cinfo);
  while (d->cinfo.output_scanline < d->cinfo.output_height) {
    JSAMPROW row = out + d->cinfo.output_scanline * row_bytes;
    jpeg_read_scanlines(&d->cinfo, &row, 1);
  }
  return true;
}

// Pillow's MULDIV255: a * b / 255 rounded, in integers.
inline int muldiv255(int a, int b) {
  int t = a * b + 128;
  return ((t >> 8) + t) >> 8;
}

// CMYK to RGB as Pillow converts: Adobe (Photoshop) files store inverted CMYK ("CMYK;I").
DecodedImage cmyk_to_rgb(const DecodedImage& cmyk, bool adobe) {
  DecodedImage rgb = allocate_image(cmyk.h, cmyk.w, 3, "JPEG");
  const uint8_t* in = cmyk.data.data();
  uint8_t* out = rgb.data.data();
  for (int64_t i = 0; i < cmyk.h * cmyk.w; ++i, in += 4, out += 3) {
    int k = adobe ? 255 - in[3] : in[3];
    int nk = 255 - k;
    for (int c = 0; c < 3; ++c) {
      int v = adobe ? 255 - in[c] : in[c];
      out[c] = static_cast<uint8_t>(nk - muldiv255(v, nk));
    }
  }
  return rgb;
}

}  // namespace

DecodedImage decode_jpeg(Bytes stream) {
  Decoder d{};
  if (!read_header(&d, stream.data(), stream.size()))
    ONYX_THROW("[ImageDecoder] JPEG: {}", d.err.message);
  const auto h = static_cast<int64_t>(d.cinfo.output_height);
  const auto w = static_cast<int64_t>(d.cinfo.output_width);
  DecodedImage img = allocate_image(h, w, d.cinfo.out_color_components, "JPEG");
  if (!read_pixels(&d, img.data.data(), static_cast<size_t>(w * img.channels)))
    ONYX_THROW("[ImageDecoder] JPEG: {}", d.err.message);
  return d.cmyk ? cmyk_to_rgb(img, d.cinfo.saw_Adobe_marker) : img;
}

}  // namespace onyx::cpu::image
