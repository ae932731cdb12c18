// Stand-in for png.cpp in builds without libpng: PNG streams are refused.
#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu::image {

DecodedImage decode_png(Bytes) {
  ONYX_THROW("[ImageDecoder] this onyx was built without libpng; install libpng-dev and rebuild");
}

}  // namespace onyx::cpu::image
