// Signal ops: DFT, STFT, the Hann/Hamming/Blackman windows and MelWeightMatrix.
// Complex values are a trailing dimension of 2 (real, imaginary); real ones a trailing 1.
#include <cmath>
#include <complex>
#include <numbers>

#include "kernels/cpu/cpu_kernels.h"
#include "graph/dispatch.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

using cd = std::complex<double>;

int64_t scalar_int(KernelContext& ctx, int i, const char* what) {
  const Tensor& t = ctx.required_input(i);
  ONYX_CHECK(t.numel() == 1 && (t.dtype() == DataType::Int64 || t.dtype() == DataType::Int32),
             "[{}] {} must be an int32/int64 scalar, got {} {}", ctx.label(), what,
             dtype_name(t.dtype()), shape_str(t.shape()));
  return t.to_int64_vector()[0];
}

double scalar_double(KernelContext& ctx, int i, const char* what) {
  const Tensor& t = ctx.required_input(i);
  ONYX_CHECK(t.numel() == 1, "[{}] {} must be a scalar, got shape {}", ctx.label(), what,
             shape_str(t.shape()));
  return t.to_double_vector()[0];
}

// Radix-2 FFT of one power-of-two size, with its twiddle factors tabulated once.
class Pow2Fft {
 public:
  explicit Pow2Fft(size_t n) : n_(n), roots_(n / 2) {
    for (size_t k = 0; k < n / 2; ++k)
      roots_[k] =
          std::polar(1.0, -2 * std::numbers::pi * static_cast<double>(k) / static_cast<double>(n));
  }
  /// In place; sign -1 forward, +1 inverse (unnormalised).
  void run(std::vector<cd>& a, int sign) const {
    for (size_t i = 1, j = 0; i < n_; ++i) {
      size_t bit = n_ >> 1;
      for (; j & bit; bit >>= 1) j ^= bit;
      j ^= bit;
      if (i < j) std::swap(a[i], a[j]);
    }
    for (size_t len = 2; len <= n_; len <<= 1) {
      size_t stride = n_ / len, half = len / 2;
      for (size_t i = 0; i < n_; i += len)
        for (size_t k = 0; k < half; ++k) {
          cd w = sign < 0 ? roots_[k * stride] : std::conj(roots_[k * stride]);
          cd u = a[i + k], v = a[i + k + half] * w;
          a[i + k] = u + v;
          a[i + k + half] = u - v;
        }
    }
  }

 private:
  size_t n_;
  std::vector<cd> roots_;
};

size_t next_pow2(size_t n) {
  size_t m = 1;
  while (m < n) m <<= 1;
  return m;
}

// Unnormalised DFT of length n: radix-2 when n is a power of two, else Bluestein's chirp-z
// through a power-of-two FFT. Built once per run, shared read-only by all lines.
class Dft {
 public:
  Dft(int64_t n, int sign)
      : n_(static_cast<size_t>(n)),
        sign_(sign),
        m_((n_ & (n_ - 1)) == 0 ? n_ : next_pow2(2 * n_ - 1)),
        fft_(m_) {
    if (m_ == n_) return;
    chirp_.resize(n_);
    for (size_t k = 0; k < n_; ++k) {
      // k^2 mod 2n keeps the angle exact for long transforms.
      auto kk = static_cast<double>((static_cast<uint64_t>(k) * k) % (2 * n_));
      chirp_[k] = std::polar(1.0, sign * std::numbers::pi * kk / static_cast<double>(n_));
    }
    kernel_.assign(m_, cd{});
    for (size_t k = 0; k < n_; ++k) {
      kernel_[k] = std::conj(chirp_[k]);
      if (k) kernel_[m_ - k] = std::conj(chirp_[k]);
    }
    fft_.run(kernel_, -1);
  }

  /// Transforms `a` (size n) in place; `work` is caller scratch.
  void run(std::vector<cd>& a, std::vector<cd>& work) const {
    if (m_ == n_) {
      fft_.run(a, sign_);
      return;
    }
    work.assign(m_, cd{});
    for (size_t k = 0; k < n_; ++k) work[k] = a[k] * chirp_[k];
    fft_.run(work, -1);
    for (size_t k = 0; k < m_; ++k) work[k] *= kernel_[k];
    fft_.run(work, 1);
    for (size_t k = 0; k < n_; ++k) a[k] = work[k] * chirp_[k] / static_cast<double>(m_);
  }

 private:
  size_t n_;
  int sign_;
  size_t m_;
  Pow2Fft fft_;
  std::vector<cd> chirp_, kernel_;
};

// x viewed as [outer, len, inner, channels]; the transform runs along `len`.
struct Lines {
  int64_t outer, len, inner, channels;
};

class DftKernel final : public Kernel {
 public:
  explicit DftKernel(const KernelInfo& info)
      : opset_(info.opset),
        axis_attr_(info.node.attr_int("axis", 1)),
        inverse_(info.node.attr_int("inverse", 0) != 0),
        onesided_(info.node.attr_int("onesided", 0) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    int64_t r = x.rank();
    ONYX_CHECK(r >= 2 && (x.shape().back() == 1 || x.shape().back() == 2),
               "[{}] input must be [..., 1] (real) or [..., 2] (complex), got {}", ctx.label(),
               shape_str(x.shape()));
    int64_t axis = opset_ >= 20 ? (ctx.input(2) ? scalar_int(ctx, 2, "axis") : -2) : axis_attr_;
    if (axis < 0) axis += r;
    ONYX_CHECK(axis >= 0 && axis < r - 1, "[{}] axis {} is out of range for input {}", ctx.label(),
               axis, shape_str(x.shape()));
    int64_t len = x.shape()[axis];
    int64_t n = ctx.input(1) ? scalar_int(ctx, 1, "dft_length")
                             : (inverse_ && onesided_ ? 2 * (len - 1) : len);
    ONYX_CHECK(n > 0, "[{}] dft_length must be positive, got {}", ctx.label(), n);
    Shape out = x.shape();
    out[axis] = onesided_ && !inverse_ ? n / 2 + 1 : n;
    out.back() = inverse_ && onesided_ ? 1 : 2;
    Lines in{dims_product(x.shape(), 0, axis), len, dims_product(x.shape(), axis + 1, r - 1),
             x.shape().back()};
    Tensor& y = ctx.allocate_output(0, x.dtype(), out);
    // An empty output needs no transform: its plan for a huge dft_length would take ~64 n bytes.
    if (y.numel() == 0) return;
    dispatch<FloatTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      transform<T>(x.data<T>(), in, n, out[axis], y.data<T>(), ctx.threads());
    });
  }

 private:
  static int64_t dims_product(const Shape& s, int64_t b, int64_t e) {
    int64_t p = 1;
    for (int64_t i = b; i < e; ++i) p *= s[i];
    return p;
  }

  template <typename T>
  void transform(const T* x, const Lines& in, int64_t n, int64_t out_len, T* y, int threads) const {
    Dft dft(n, inverse_ ? 1 : -1);
    bool irfft = inverse_ && onesided_;
    int64_t out_ch = irfft ? 1 : 2;
    parallel_for(in.outer * in.inner, threads, 1, [&](int64_t b, int64_t e) {
      std::vector<cd> buf, work;
      for (int64_t line = b; line < e; ++line) {
        int64_t o = line / in.inner, i = line % in.inner;
        auto at = [&](int64_t k) {
          const T* p = x + ((o * in.len + k) * in.inner + i) * in.channels;
          return cd(static_cast<double>(p[0]), in.channels == 2 ? static_cast<double>(p[1]) : 0.0);
        };
        buf.assign(static_cast<size_t>(n), cd{});
        if (irfft) {  // Hermitian extension of bins 0..n/2; DC and Nyquist are taken as real.
          int64_t half = std::min(in.len, n / 2 + 1);
          for (int64_t k = 0; k < half; ++k) buf[k] = at(k);
          buf[0] = cd(buf[0].real(), 0);
          if (n % 2 == 0) buf[n / 2] = cd(buf[n / 2].real(), 0);
          for (int64_t k = 1; k < (n + 1) / 2; ++k) buf[n - k] = std::conj(buf[k]);
        } else {
          for (int64_t k = 0; k < std::min(in.len, n); ++k) buf[k] = at(k);
        }
        dft.run(buf, work);
        double scale = inverse_ ? 1.0 / static_cast<double>(n) : 1.0;
        for (int64_t k = 0; k < out_len; ++k) {
          T* q = y + ((o * out_len + k) * in.inner + i) * out_ch;
          q[0] = static_cast<T>(buf[k].real() * scale);
          if (out_ch == 2) q[1] = static_cast<T>(buf[k].imag() * scale);
        }
      }
    });
  }

  int64_t opset_;
  int64_t axis_attr_;
  bool inverse_, onesided_;
};

class StftKernel final : public Kernel {
 public:
  explicit StftKernel(const KernelInfo& info) : onesided_(info.node.attr_int("onesided", 1) != 0) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.rank() == 3 && (x.shape()[2] == 1 || x.shape()[2] == 2),
               "[{}] signal must be [batch, length, 1 or 2], got {}", ctx.label(),
               shape_str(x.shape()));
    int64_t batch = x.shape()[0], len = x.shape()[1], ch = x.shape()[2];
    int64_t step = scalar_int(ctx, 1, "frame_step");
    const Tensor* window = ctx.input(2);
    int64_t fl = ctx.input(3) ? scalar_int(ctx, 3, "frame_length") : window ? window->numel() : len;
    if (window)
      ONYX_CHECK(window->rank() == 1 && window->numel() == fl && window->dtype() == x.dtype(),
                 "[{}] window must be a 1-D {} of frame_length {}, got {} {}", ctx.label(),
                 dtype_name(x.dtype()), fl, dtype_name(window->dtype()),
                 shape_str(window->shape()));
    ONYX_CHECK(step > 0 && fl > 0 && fl <= len,
               "[{}] needs frame_step > 0 and 0 < frame_length <= signal length {}, got {} and {}",
               ctx.label(), len, step, fl);
    int64_t frames = 1 + (len - fl) / step, bins = onesided_ ? fl / 2 + 1 : fl;
    Tensor& y = ctx.allocate_output(0, x.dtype(), {batch, frames, bins, 2});
    dispatch<FloatTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* px = x.data<T>();
      const T* pw = window ? window->data<T>() : nullptr;
      T* py = y.data<T>();
      Dft dft(fl, -1);
      parallel_for(batch * frames, ctx.threads(), 1, [&](int64_t b, int64_t e) {
        std::vector<cd> buf, work;
        for (int64_t bf = b; bf < e; ++bf) {
          int64_t bi = bf / frames, f = bf % frames;
          buf.resize(static_cast<size_t>(fl));
          for (int64_t k = 0; k < fl; ++k) {
            const T* p = px + (bi * len + f * step + k) * ch;
            double w = pw ? static_cast<double>(pw[k]) : 1.0;
            buf[k] =
                cd(static_cast<double>(p[0]) * w, ch == 2 ? static_cast<double>(p[1]) * w : 0.0);
          }
          dft.run(buf, work);
          T* q = py + bf * bins * 2;
          for (int64_t k = 0; k < bins; ++k) {
            q[2 * k] = static_cast<T>(buf[k].real());
            q[2 * k + 1] = static_cast<T>(buf[k].imag());
          }
        }
      });
    });
  }

 private:
  bool onesided_;
};

enum class Window { Hann, Hamming, Blackman };

class WindowKernel final : public Kernel {
 public:
  WindowKernel(const KernelInfo& info, Window kind)
      : kind_(kind),
        dtype_(static_cast<DataType>(info.node.attr_int("output_datatype", 1))),
        periodic_(info.node.attr_int("periodic", 1) != 0) {}

  void compute(KernelContext& ctx) const override {
    int64_t size = scalar_int(ctx, 0, "size");
    ONYX_CHECK(size >= 0, "[{}] size must be >= 0, got {}", ctx.label(), size);
    Tensor& y = ctx.allocate_output(0, dtype_, {size});
    // Symmetric windows divide by size - 1; a one-point window is [1].
    double denom = static_cast<double>(periodic_ || size == 1 ? size : size - 1);
    dispatch<NumericTypes>(dtype_, ctx.label(), [&]<typename T>() {
      T* p = y.data<T>();
      for (int64_t i = 0; i < size; ++i) {
        double t = 2 * std::numbers::pi * static_cast<double>(i) / denom, v;
        switch (kind_) {
          case Window::Hann:
            v = 0.5 - 0.5 * std::cos(t);
            break;
          case Window::Hamming:
            v = 25.0 / 46.0 - (21.0 / 46.0) * std::cos(t);
            break;
          default:
            v = 0.42 - 0.5 * std::cos(t) + 0.08 * std::cos(2 * t);
            break;
        }
        p[i] = static_cast<T>(size == 1 ? 1.0 : v);
      }
    });
  }

 private:
  Window kind_;
  DataType dtype_;
  bool periodic_;
};

class MelWeightMatrixKernel final : public Kernel {
 public:
  explicit MelWeightMatrixKernel(const KernelInfo& info)
      : dtype_(static_cast<DataType>(info.node.attr_int("output_datatype", 1))) {}

  void compute(KernelContext& ctx) const override {
    int64_t mels = scalar_int(ctx, 0, "num_mel_bins"), dft_len = scalar_int(ctx, 1, "dft_length");
    int64_t rate = scalar_int(ctx, 2, "sample_rate");
    double lo = scalar_double(ctx, 3, "lower_edge_hertz"),
           hi = scalar_double(ctx, 4, "upper_edge_hertz");
    ONYX_CHECK(
        mels > 0 && dft_len > 0 && rate > 0 && lo >= 0 && lo < hi,
        "[{}] needs num_mel_bins, dft_length, sample_rate > 0 and 0 <= lower < upper edge; got "
        "{}, {}, {}, {}, {}",
        ctx.label(), mels, dft_len, rate, lo, hi);
    int64_t spec_bins = dft_len / 2 + 1;
    // Taken first: its size check bounds mels and dft_len for the arithmetic below.
    Tensor& y = ctx.allocate_output(0, dtype_, {spec_bins, mels});
    auto to_mel = [](double f) { return 2595.0 * std::log10(1.0 + f / 700.0); };
    double mel_lo = to_mel(lo), step = (to_mel(hi) - mel_lo) / static_cast<double>(mels + 2);
    // Band edges as spectrogram bin indices (the ONNX reference's mel spacing).
    std::vector<int64_t> edge(static_cast<size_t>(mels + 2));
    for (int64_t i = 0; i < mels + 2; ++i) {
      double hz =
          700.0 * std::expm1((static_cast<double>(i) * step + mel_lo) / 2595.0 * std::log(10.0));
      // Checked in double: an infinite upper edge gives an infinite bin.
      const double bin =
          std::floor(static_cast<double>(dft_len + 1) * hz / static_cast<double>(rate));
      ONYX_CHECK(bin >= 0 && bin < static_cast<double>(spec_bins),
                 "[{}] upper_edge_hertz {} lies above the Nyquist bin", ctx.label(), hi);
      edge[i] = static_cast<int64_t>(bin);
    }
    std::vector<double> w(static_cast<size_t>(spec_bins * mels), 0.0);
    for (int64_t m = 0; m < mels; ++m) {
      int64_t l = edge[m], c = edge[m + 1], h = edge[m + 2];
      if (c == l) {
        w[c * mels + m] = 1;
      } else {
        for (int64_t j = l; j <= c; ++j)
          w[j * mels + m] = static_cast<double>(j - l) / static_cast<double>(c - l);
      }
      for (int64_t j = c; j < h; ++j)
        w[j * mels + m] = static_cast<double>(h - j) / static_cast<double>(h - c);
    }
    dispatch<NumericTypes>(dtype_, ctx.label(), [&]<typename T>() {
      T* p = y.data<T>();
      for (size_t i = 0; i < w.size(); ++i) p[i] = static_cast<T>(w[i]);
    });
  }

 private:
  DataType dtype_;
};

template <Window kind>
KernelFactory window_factory() {
  return [](const KernelInfo& info) -> std::unique_ptr<Kernel> {
    return std::make_unique<WindowKernel>(info, kind);
  };
}

}  // namespace

void register_signal_kernels(KernelRegistry& r) {
  const std::vector<DataType> ints{DataType::Int32, DataType::Int64};
  r.add(
      {.op_type = "DFT", .since = 17, .types = float_types(), .create = make_factory<DftKernel>()});
  r.add({.op_type = "STFT",
         .since = 17,
         .types = float_types(),
         .create = make_factory<StftKernel>()});
  r.add({.op_type = "HannWindow",
         .since = 17,
         .types = ints,
         .create = window_factory<Window::Hann>()});
  r.add({.op_type = "HammingWindow",
         .since = 17,
         .types = ints,
         .create = window_factory<Window::Hamming>()});
  r.add({.op_type = "BlackmanWindow",
         .since = 17,
         .types = ints,
         .create = window_factory<Window::Blackman>()});
  r.add({.op_type = "MelWeightMatrix",
         .since = 17,
         .types = ints,
         .create = make_factory<MelWeightMatrixKernel>()});
}

}  // namespace onyx::cpu
