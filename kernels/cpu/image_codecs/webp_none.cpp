// Stand-in for webp.cpp in builds without libwebp: WebP streams are refused.
#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu::image {

DecodedImage decode_webp(Bytes) {
  ONYX_THROW("[ImageDecoder] this onyx was built without libwebp; install libwebp-dev and rebuild");
}

}  // namespace onyx::cpu::image
