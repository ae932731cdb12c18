// Stand-in for jpeg2k.cpp in builds without OpenJPEG: JPEG 2000 streams are refused.
#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu::image {

DecodedImage decode_jpeg2k(Bytes) {
  ONYX_THROW(
      "[ImageDecoder] this onyx was built without OpenJPEG; install libopenjp2-7-dev and rebuild");
}

}  // namespace onyx::cpu::image
