// JPEG 2000 (a raw J2K codestream or a JP2 file) through OpenJPEG, read from memory. The
// samples are reduced to 8 bits and interleaved the way Pillow's Jpeg2KDecode.c does it.
#include <openjpeg.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu::image {
namespace {

/// The stream OpenJPEG reads from, and the first error message.
struct Source {
  Bytes bytes;
  size_t pos = 0;
  char message[512] = {};
};

OPJ_SIZE_T read_fn(void* out, OPJ_SIZE_T n, void* user) {
  auto* src = static_cast<Source*>(user);
  if (src->pos >= src->bytes.size()) return static_cast<OPJ_SIZE_T>(-1);  // end of stream
  n = std::min<OPJ_SIZE_T>(n, src->bytes.size() - src->pos);
  std::memcpy(out, src->bytes.data() + src->pos, n);
  src->pos += n;
  return n;
}
OPJ_OFF_T skip_fn(OPJ_OFF_T n, void* user) {
  auto* src = static_cast<Source*>(user);
  auto pos = static_cast<OPJ_OFF_T>(src->pos), size = static_cast<OPJ_OFF_T>(src->bytes.size());
  n = std::clamp(n, -pos, size - pos);
  src->pos = static_cast<size_t>(pos + n);
  return n;
}
OPJ_BOOL seek_fn(OPJ_OFF_T at, void* user) {
  auto* src = static_cast<Source*>(user);
  if (at < 0 || static_cast<uint64_t>(at) > src->bytes.size()) return OPJ_FALSE;
  src->pos = static_cast<size_t>(at);
  return OPJ_TRUE;
}

void on_error(const char* msg, void* user) {
  auto* src = static_cast<Source*>(user);
  if (src->message[0] != '\0') return;
  std::snprintf(src->message, sizeof src->message, "%s", msg);
  // OpenJPEG messages end in a newline.
  size_t len = std::strlen(src->message);
  if (len && src->message[len - 1] == '\n') src->message[len - 1] = '\0';
}
void ignore(const char*, void*) {}

/// OpenJPEG's objects, destroyed however decoding ended.
struct Handles {
  opj_stream_t* stream = nullptr;
  opj_codec_t* codec = nullptr;
  opj_image_t* image = nullptr;
  ~Handles() {
    if (image) opj_image_destroy(image);
    if (codec) opj_destroy_codec(codec);
    if (stream) opj_stream_destroy(stream);
  }
};

/// Component c's sample at image pixel (x, y), reduced to 8 bits as Pillow does: signed
/// samples offset to unsigned, deeper ones rounded and shifted down, shallower shifted up
/// (clamped to 255 where Pillow's uint8 cast would wrap). Subsampled components (dx, dy > 1)
/// repeat their samples.
struct Component {
  const opj_image_comp_t* comp;
  int64_t offset, shift, round, max;
  explicit Component(const opj_image_comp_t* c)
      : comp(c),
        offset(c->sgnd ? int64_t{1} << (c->prec - 1) : 0),
        shift(static_cast<int64_t>(c->prec) - 8),
        round(c->prec > 8 ? int64_t{1} << (c->prec - 9) : 0),
        max((int64_t{1} << c->prec) - 1) {}
  uint8_t at(int64_t x, int64_t y) const {
    const int64_t cx = std::clamp<int64_t>(x / comp->dx - comp->x0, 0, comp->w - 1);
    const int64_t cy = std::clamp<int64_t>(y / comp->dy - comp->y0, 0, comp->h - 1);
    int64_t v = std::clamp<int64_t>(comp->data[cy * comp->w + cx] + offset, 0, max);
    v = shift > 0 ? (v + round) >> shift : v << -shift;
    return static_cast<uint8_t>(std::min<int64_t>(v, 255));
  }
};

// sYCC (full-range BT.601) to RGB; Pillow's fixed-point tables may differ from this by 1.
void sycc_to_rgb(uint8_t* p) {
  double y = p[0], cb = p[1] - 128.0, cr = p[2] - 128.0;
  double rgb[3] = {y + 1.402 * cr, y - 0.344136 * cb - 0.714136 * cr, y + 1.772 * cb};
  for (int c = 0; c < 3; ++c)
    p[c] = static_cast<uint8_t>(std::clamp(std::lround(rgb[c]), 0L, 255L));
}

}  // namespace

DecodedImage decode_jpeg2k(Bytes stream) {
  Source src{stream};
  Handles h;
  // The JP2 file format starts with its signature box; anything else is a codestream.
  bool jp2 =
      stream.size() >= 4 && stream[0] == 0 && stream[1] == 0 && stream[2] == 0 && stream[3] == 0x0C;
  h.codec = opj_create_decompress(jp2 ? OPJ_CODEC_JP2 : OPJ_CODEC_J2K);
  h.stream = opj_stream_create(OPJ_J2K_STREAM_CHUNK_SIZE, OPJ_TRUE);
  ONYX_CHECK(h.codec && h.stream,
             "[ImageDecoder] JPEG 2000: OpenJPEG could not allocate its decoder");
  opj_set_error_handler(h.codec, on_error, &src);
  opj_set_warning_handler(h.codec, ignore, nullptr);
  opj_set_info_handler(h.codec, ignore, nullptr);
  opj_stream_set_read_function(h.stream, read_fn);
  opj_stream_set_skip_function(h.stream, skip_fn);
  opj_stream_set_seek_function(h.stream, seek_fn);
  opj_stream_set_user_data(h.stream, &src, nullptr);
  opj_stream_set_user_data_length(h.stream, stream.size());
  opj_dparameters_t params;
  opj_set_default_decoder_parameters(&params);
  ONYX_CHECK(opj_setup_decoder(h.codec, &params) && opj_read_header(h.stream, h.codec, &h.image),
             "[ImageDecoder] JPEG 2000: cannot read the header: {}", src.message);
  const opj_image_t& im = *h.image;
  ONYX_CHECK(im.numcomps >= 1 && im.x1 > im.x0 && im.y1 > im.y0,
             "[ImageDecoder] JPEG 2000: expected a non-empty image, found {} components over "
             "[{}, {}) x [{}, {})",
             im.numcomps, im.x0, im.x1, im.y0, im.y1);
  ONYX_CHECK(im.color_space != OPJ_CLRSPC_EYCC && im.color_space != OPJ_CLRSPC_CMYK,
             "[ImageDecoder] JPEG 2000: e-YCC and CMYK images are not supported");
  const int64_t w = im.x1 - im.x0, ht = im.y1 - im.y0;
  // OpenJPEG holds every sample as an int32: bound that before it allocates.
  checked_image_bytes(ht, w, 4 * static_cast<int64_t>(im.numcomps), "JPEG 2000");
  ONYX_CHECK(opj_decode(h.codec, h.stream, h.image) && opj_end_decompress(h.codec, h.stream),
             "[ImageDecoder] JPEG 2000: cannot decode the {}x{} image: {}", w, ht, src.message);
  // 1 component: gray; 2: gray + alpha; 3: RGB (or sYCC); 4 or more: RGBA, extras ignored.
  const int64_t channels = std::min<int64_t>(im.numcomps, 4);
  std::vector<Component> comps;
  for (int64_t c = 0; c < channels; ++c) {
    const opj_image_comp_t& comp = im.comps[c];
    ONYX_CHECK(comp.data && comp.w > 0 && comp.h > 0 && comp.dx > 0 && comp.dy > 0 &&
                   comp.prec >= 1 && comp.prec <= 30,
               "[ImageDecoder] JPEG 2000: component {} has no usable samples ({}x{}, {} bits)", c,
               comp.w, comp.h, comp.prec);
    comps.emplace_back(&comp);
  }
  const bool sycc = im.color_space == OPJ_CLRSPC_SYCC && channels >= 3;
  DecodedImage img = allocate_image(ht, w, channels, "JPEG 2000");
  uint8_t* out = img.data.data();
  for (int64_t y = im.y0; y < im.y1; ++y) {
    for (int64_t x = im.x0; x < im.x1; ++x, out += channels) {
      for (int64_t c = 0; c < channels; ++c) out[c] = comps[c].at(x, y);
      if (sycc) sycc_to_rgb(out);
    }
  }
  return img;
}

}  // namespace onyx::cpu::image
