// Stand-in for tiff.cpp in builds without libtiff: TIFF streams are refused.
#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu::image {

DecodedImage decode_tiff(Bytes) {
  ONYX_THROW("[ImageDecoder] this onyx was built without libtiff; install libtiff-dev and rebuild");
}

}  // namespace onyx::cpu::image
