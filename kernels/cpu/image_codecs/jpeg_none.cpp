// Stand-in for jpeg.cpp in builds without libjpeg-turbo: JPEG streams are refused.
#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu::image {

DecodedImage decode_jpeg(Bytes) {
  ONYX_THROW(
      "[ImageDecoder] this onyx was built without libjpeg-turbo; install libjpeg62-turbo-dev and "
      "rebuild");
}

}  // namespace onyx::cpu::image
