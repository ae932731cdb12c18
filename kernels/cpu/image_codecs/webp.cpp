// WebP (lossy and lossless, still images) through libwebp, decoded straight into our buffer.
#include <webp/decode.h>

#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu::image {
namespace {

const char* status_name(VP8StatusCode s) {
  switch (s) {
    case VP8_STATUS_OUT_OF_MEMORY:
      return "out of memory";
    case VP8_STATUS_INVALID_PARAM:
      return "invalid parameter";
    case VP8_STATUS_BITSTREAM_ERROR:
      return "corrupt bitstream";
    case VP8_STATUS_UNSUPPORTED_FEATURE:
      return "unsupported feature";
    case VP8_STATUS_SUSPENDED:
      return "suspended";
    case VP8_STATUS_USER_ABORT:
      return "aborted";
    case VP8_STATUS_NOT_ENOUGH_DATA:
      return "the stream ends early (truncated WebP)";
    default:
      return "unknown error";
  }
}

}  // namespace

DecodedImage decode_webp(Bytes stream) {
  WebPDecoderConfig config;
  ONYX_CHECK(WebPInitDecoderConfig(&config), "[ImageDecoder] WebP: libwebp version mismatch");
  VP8StatusCode s = WebPGetFeatures(stream.data(), stream.size(), &config.input);
  ONYX_CHECK(s == VP8_STATUS_OK, "[ImageDecoder] WebP: cannot read the header: {}", status_name(s));
  ONYX_CHECK(!config.input.has_animation,
             "[ImageDecoder] WebP: expected a still image, found an animation (not supported)");
  // RGB only: alpha would be dropped anyway, and libwebp drops it without blending.
  DecodedImage img = allocate_image(config.input.height, config.input.width, 3, "WebP");
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = img.data.data();
  config.output.u.RGBA.stride = static_cast<int>(img.w * 3);
  config.output.u.RGBA.size = img.data.size();
  s = WebPDecode(stream.data(), stream.size(), &config);
  WebPFreeDecBuffer(&config.output);  // frees nothing of ours (external memory), only state
  ONYX_CHECK(s == VP8_STATUS_OK, "[ImageDecoder] WebP: cannot decode the {}x{} image: {}", img.w,
             img.h, status_name(s));
  return img;
}

}  // namespace onyx::cpu::image
