// TIFF (first page) through libtiff, read from memory with client callbacks (no temporary
// file). libtiff's RGBA interface handles every photometric, bit depth and compression it
// knows. Error and warning handlers are set per open (TIFFOpenOptions), so concurrent
// decodes do not share a global handler and nothing is printed to stderr.
#include <tiffio.h>

#include <algorithm>
#include <cstdarg>
#include <cstdio>
#include <cstring>

#include "kernels/cpu/image_codecs/codec.h"

namespace onyx::cpu::image {
namespace {

/// The stream libtiff reads from, and the first error message.
struct Source {
  Bytes bytes;
  uint64_t pos = 0;
  char message[512] = {};
};

tmsize_t read_proc(thandle_t h, void* out, tmsize_t n) {
  auto* src = static_cast<Source*>(h);
  if (n < 0 || src->pos >= src->bytes.size()) return 0;
  size_t count = std::min<size_t>(static_cast<size_t>(n), src->bytes.size() - src->pos);
  std::memcpy(out, src->bytes.data() + src->pos, count);
  src->pos += count;
  return static_cast<tmsize_t>(count);
}
tmsize_t write_proc(thandle_t, void*, tmsize_t) { return -1; }
toff_t seek_proc(thandle_t h, toff_t off, int whence) {
  auto* src = static_cast<Source*>(h);
  uint64_t base = whence == SEEK_CUR ? src->pos : whence == SEEK_END ? src->bytes.size() : 0;
  src->pos = base + off;  // past the end is allowed; reads there return 0 bytes
  return src->pos;
}
int close_proc(thandle_t) { return 0; }
toff_t size_proc(thandle_t h) { return static_cast<Source*>(h)->bytes.size(); }

int on_error(TIFF*, void* user, const char* module, const char* fmt, va_list ap) {
  auto* src = static_cast<Source*>(user);
  if (src->message[0] == '\0') std::vsnprintf(src->message, sizeof src->message, fmt, ap);
  return 1;  // handled: the global handler (stderr) is not called
}
int on_warning(TIFF*, void*, const char*, const char*, va_list) { return 1; }

/// libtiff's handles, closed however decoding ended.
struct Handles {
  TIFFOpenOptions* opts = TIFFOpenOptionsAlloc();
  TIFF* tif = nullptr;
  ~Handles() {
    if (tif) TIFFClose(tif);
    TIFFOpenOptionsFree(opts);
  }
};

}  // namespace

DecodedImage decode_tiff(Bytes stream) {
  Source src{stream};
  Handles h;
  ONYX_CHECK(h.opts, "[ImageDecoder] TIFF: libtiff could not allocate its options");
  TIFFOpenOptionsSetErrorHandlerExtR(h.opts, on_error, &src);
  TIFFOpenOptionsSetWarningHandlerExtR(h.opts, on_warning, &src);
  TIFFOpenOptionsSetMaxSingleMemAlloc(h.opts, kMaxDecodedBytes);
  // "m": no memory mapping, so libtiff never touches our (const) buffer directly.
  h.tif = TIFFClientOpenExt("stream", "rm", &src, read_proc, write_proc, seek_proc, close_proc,
                            size_proc, nullptr, nullptr, h.opts);
  ONYX_CHECK(h.tif, "[ImageDecoder] TIFF: cannot read the header: {}", src.message);
  uint32_t w = 0, ht = 0;
  uint16_t orientation = ORIENTATION_TOPLEFT;
  TIFFGetField(h.tif, TIFFTAG_IMAGEWIDTH, &w);
  TIFFGetField(h.tif, TIFFTAG_IMAGELENGTH, &ht);
  TIFFGetFieldDefaulted(h.tif, TIFFTAG_ORIENTATION, &orientation);
  char why[1024] = {};
  ONYX_CHECK(TIFFRGBAImageOK(h.tif, why), "[ImageDecoder] TIFF: unsupported layout: {}", why);
  checked_image_bytes(ht, w, 4, "TIFF");
  std::vector<uint32_t> raster(static_cast<size_t>(w) * ht);
  // Asking for the file's own orientation keeps the stored row order, as Pillow returns it
  // (Image.open does not apply the Orientation tag).
  ONYX_CHECK(TIFFReadRGBAImageOriented(h.tif, w, ht, raster.data(), orientation, 1),
             "[ImageDecoder] TIFF: cannot decode the {}x{} image: {}", w, ht, src.message);
  // Alpha is dropped by ImageDecoder anyway; gray sources come back with R = G = B.
  DecodedImage img = allocate_image(ht, w, 3, "TIFF");
  uint8_t* out = img.data.data();
  for (uint32_t p : raster) {
    *out++ = static_cast<uint8_t>(TIFFGetR(p));
    *out++ = static_cast<uint8_t>(TIFFGetG(p));
    *out++ = static_cast<uint8_t>(TIFFGetB(p));
  }
  return img;
}

}  // namespace onyx::cpu::image
