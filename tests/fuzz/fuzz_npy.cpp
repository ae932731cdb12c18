// .npy bytes -> npy::decode -> the conversions a model input applies (bfloat16 and float8
// bit patterns, sub-byte range checks) -> encode again. Seeds: tests/fuzz/seeds/npy.
#include <cstdint>
#include <cstring>

#include "fuzz_common.h"
#include "launcher/npy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string bytes(onyx::fuzz::bytes_of(data, size));
  try {
    onyx::Tensor t = onyx::npy::decode(bytes, "fuzz.npy");
    // A decoded tensor round-trips: encode(decode(x)) decodes to the same bytes.
    std::string again = onyx::npy::encode(t);
    onyx::Tensor back = onyx::npy::decode(again, "again.npy");
    if (back.dtype() != t.dtype() || back.shape() != t.shape() ||
        (t.dtype() != onyx::DataType::String && t.nbytes() > 0 && std::memcmp(back.raw(), t.raw(), t.nbytes()) != 0))
      std::abort();
    // The first byte picks the declared input type to convert to.
    auto expected = static_cast<onyx::DataType>(size ? data[0] % 26 + 1 : 1);
    onyx::npy::convert_for_input(std::move(t), expected, "fuzz.npy", "x");
  } catch (const onyx::Error&) {
  }
  return 0;
}
