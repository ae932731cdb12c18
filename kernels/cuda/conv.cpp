// Conv, ConvTranspose and com.microsoft FusedConv (1-D/2-D/3-D, groups, dilations, strides,
// pads and auto_pad, output_padding/output_shape) on cuDNN 9's legacy convolution API (still
// present, deprecated, in cudnn_cnn.h: simpler than the graph API for plain NCHW work), for
// float, float16 and bfloat16 (fp32 accumulation; cuDNN runs bfloat16 convolutions on sm_80 and
// later) and double. The geometry is the CPU kernels' (kernels/window_geometry.h); opset ranges
// and messages mirror kernels/cpu/conv*.cpp.
//
// ONNX pads may be asymmetric, cuDNN's are not: a convolution pads symmetrically by the smaller
// side in cuDNN and copies X into a buffer padded by the difference first; a transposed one
// whose pads are not symmetric (or whose output_padding reaches a stride, or whose output_shape
// makes pads negative) computes the uncropped output and crops it into Y. The transposed
// convolution is cuDNN's backward-data pass of the convolution ONNX's ConvTranspose inverts.
//
// Per input shape, the heuristic (cudnnGet*Algorithm_v7) is asked once; the descriptors, the
// algorithm and its workspace size are cached in the kernel (mutex-guarded) and read-only after.
// Bias, FusedConv's Z and its activation run in one pass of our own kernel
// (conv_epilogue.cu): one read and write of Y whatever the combination, where cudnnAddTensor
// would cost that pass for the bias alone.
#include <algorithm>
#include <climits>
#include <cstdlib>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "kernels/cuda/conv_epilogue_launch.h"
#include "kernels/cuda/cuda_common.h"
#include "kernels/cuda/library_handles.h"
#include "kernels/window_geometry.h"

namespace onyx::cuda {
namespace {

using cv::Act;
using cv::Dims3;
using cv::DType;

/// Workspace an algorithm may ask for; faster ones that want more are passed over.
constexpr size_t kMaxConvWorkspace = size_t(512) << 20;

DType cv_dtype(DataType dt) {
  switch (dt) {
    case DataType::Float: return DType::F32;
    case DataType::Float16: return DType::F16;
    case DataType::BFloat16: return DType::BF16;
    case DataType::Double: return DType::F64;
    default: ONYX_THROW("[cuda] convolution has no {} kernel", dtype_name(dt));
  }
}

cudnnDataType_t cudnn_type(DataType dt) {
  switch (dt) {
    case DataType::Float16: return CUDNN_DATA_HALF;
    case DataType::BFloat16: return CUDNN_DATA_BFLOAT16;
    case DataType::Double: return CUDNN_DATA_DOUBLE;
    default: return CUDNN_DATA_FLOAT;
  }
}

/// The math type asked of cuDNN: tensor cores for the 16-bit types; for float32, FMA only
/// unless ONYX_CUDA_TF32=1 (CUDNN_DEFAULT_MATH lets cuDNN use TF32 on Ampere and later).
cudnnMathType_t wanted_math(DataType dt) {
  if (dt == DataType::Float16 || dt == DataType::BFloat16) return CUDNN_TENSOR_OP_MATH;
  if (dt == DataType::Float && !tf32_enabled()) return CUDNN_FMA_MATH;
  return CUDNN_DEFAULT_MATH;
}

/// Whether a heuristic result's math type keeps float32 out of TF32 when it must.
bool math_allowed(DataType dt, cudnnMathType_t m) {
  if (dt == DataType::Float && !tf32_enabled()) return m == CUDNN_FMA_MATH || m == CUDNN_DEFAULT_MATH;
  return true;
}

using Geometry = ConvGeometry;  // kernels/window_geometry.h, shared with the CPU kernels

/// FusedConv's activation (kernels/window_geometry.h) as the launcher's struct, whose
/// enumerators are the same.
Act parse_activation(const Node& n) {
  using Shared = ConvActivationParams::Kind;
  static_assert(int(Act::Kind::None) == int(Shared::None) &&
                int(Act::Kind::Relu) == int(Shared::Relu) &&
                int(Act::Kind::LeakyRelu) == int(Shared::LeakyRelu) &&
                int(Act::Kind::Sigmoid) == int(Shared::Sigmoid) &&
                int(Act::Kind::Tanh) == int(Shared::Tanh) &&
                int(Act::Kind::Clip) == int(Shared::Clip) &&
                int(Act::Kind::HardSigmoid) == int(Shared::HardSigmoid));
  const ConvActivationParams p = parse_conv_activation(n);
  Act a;
  a.kind = static_cast<Act::Kind>(p.kind);
  a.alpha = p.alpha;
  a.beta = p.beta;
  return a;
}

Dims3 dims3(const Shape& v, int64_t fill) {
  Dims3 r{{fill, fill, fill}};
  std::copy(v.begin(), v.end(), r.d + (3 - v.size()));
  return r;
}

/// A cuDNN convolution for one (dtype, X shape, W shape): descriptors, algorithm, workspace,
/// and the padding or cropping around it. Immutable once built.
struct ConvEntry {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;  // cuDNN's input and output (see below)
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  int algo = 0;  // cudnnConvolutionFwdAlgo_t, or cudnnConvolutionBwdDataAlgo_t when transposed
  size_t workspace = 0;
  // Convolution with asymmetric pads: X is first copied into a [N, C, x_buf...] buffer.
  bool pad_x = false;
  Shape x_buf;
  Dims3 x_dims{}, x_buf_dims{}, x_off{};
  // Transposed with pads cuDNN cannot express: cuDNN writes a [N, M, y_buf...] buffer,
  // cropped into Y afterwards.
  bool crop_y = false;
  Shape y_buf;
  Dims3 y_dims{}, y_buf_dims{}, y_off{};

  ConvEntry() = default;
  ConvEntry(const ConvEntry&) = delete;
  ConvEntry& operator=(const ConvEntry&) = delete;
  ~ConvEntry() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

/// cuDNN's dims of a [N, C, spatial...] shape as ints; 1-D gains a trailing 1 (cuDNN's
/// Nd descriptors start at 4 dims). The legacy API indexes with int: larger tensors are refused.
std::vector<int> cudnn_dims(const std::string& who, const Shape& s) {
  ONYX_CHECK(shape_numel(s) <= INT32_MAX,
             "[{}] tensor {} has more than 2^31 - 1 elements, beyond cuDNN's convolution API",
             who, shape_str(s));
  std::vector<int> d(s.begin(), s.end());
  if (d.size() == 3) d.push_back(1);
  return d;
}

void set_tensor(const std::string& who, cudnnTensorDescriptor_t& t, DataType dt, const Shape& s) {
  std::vector<int> d = cudnn_dims(who, s);
  ONYX_CUDNN_CHECK(cudnnCreateTensorDescriptor(&t));
  ONYX_CUDNN_CHECK(cudnnSetTensorNdDescriptorEx(t, CUDNN_TENSOR_NCHW, cudnn_type(dt),
                                                static_cast<int>(d.size()), d.data()));
}

/// Builds the entry for geometry `g`, asking cuDNN's heuristic for the fastest algorithm whose
/// workspace fits kMaxConvWorkspace.
std::shared_ptr<ConvEntry> make_entry(const std::string& who, cudnnHandle_t h, const Geometry& g,
                                      DataType dt, bool transpose, const Shape& w_shape) {
  auto e = std::make_shared<ConvEntry>();
  const size_t nsp = g.nsp();
  Shape x_shape{g.N, g.C}, y_shape{g.N, g.M};
  x_shape.insert(x_shape.end(), g.in.begin(), g.in.end());
  y_shape.insert(y_shape.end(), g.out.begin(), g.out.end());
  std::vector<int> pads(nsp), strides(nsp), dils(nsp);
  for (size_t i = 0; i < nsp; ++i) {
    strides[i] = static_cast<int>(g.stride[i]);
    dils[i] = static_cast<int>(g.dil[i]);
    ONYX_CHECK(g.stride[i] <= INT32_MAX && g.dil[i] <= INT32_MAX &&
                   std::max(std::abs(g.pad_l[i]), std::abs(g.pad_r[i])) <= INT32_MAX,
               "[{}] strides, dilations and pads beyond 2^31 - 1 are not cuDNN's", who);
  }
  Shape cudnn_x = x_shape, cudnn_y = y_shape;
  if (!transpose) {
    // Symmetric pad p per dim in cuDNN; the rest (pad - p on one side) by copying X.
    Shape buf = g.in, off(nsp);
    for (size_t i = 0; i < nsp; ++i) {
      const int64_t p = std::max<int64_t>(0, std::min(g.pad_l[i], g.pad_r[i]));
      pads[i] = static_cast<int>(p);
      off[i] = g.pad_l[i] - p;
      buf[i] = g.in[i] + (g.pad_l[i] - p) + (g.pad_r[i] - p);
      e->pad_x |= buf[i] != g.in[i] || off[i] != 0;
    }
    if (e->pad_x) {
      cudnn_x = {g.N, g.C};
      cudnn_x.insert(cudnn_x.end(), buf.begin(), buf.end());
      e->x_buf = cudnn_x;
      e->x_dims = dims3(g.in, 1);
      e->x_buf_dims = dims3(buf, 1);
      e->x_off = dims3(off, 0);
    }
  } else {
    // cuDNN's backward data takes a symmetric pad p and an output within stride - 1 of
    // s * (in - 1) + ek - 2p: ONNX's output when its pads are symmetric and output_padding < s.
    Shape base(nsp);
    bool direct = true;
    for (size_t i = 0; i < nsp; ++i) {
      base[i] = g.stride[i] * (g.in[i] - 1) + (g.k[i] - 1) * g.dil[i] + 1;
      const int64_t opad = g.out[i] + 2 * g.pad_l[i] - base[i];
      direct &= g.pad_l[i] == g.pad_r[i] && g.pad_l[i] >= 0 && opad >= 0 && opad < g.stride[i];
    }
    if (direct) {
      for (size_t i = 0; i < nsp; ++i) pads[i] = static_cast<int>(g.pad_l[i]);
    } else {
      // Pads 0: cuDNN writes every position a tap reaches (base); Y takes [pad_l, pad_l + out)
      // of it, zero where that lies outside.
      e->crop_y = true;
      cudnn_y = {g.N, g.M};
      cudnn_y.insert(cudnn_y.end(), base.begin(), base.end());
      e->y_buf = cudnn_y;
      e->y_dims = dims3(g.out, 1);
      e->y_buf_dims = dims3(base, 1);
      Shape off(nsp);
      for (size_t i = 0; i < nsp; ++i) off[i] = -g.pad_l[i];
      e->y_off = dims3(off, 0);
    }
  }
  if (nsp == 1) {  // 1-D as 2-D with a trailing unit dim
    pads.push_back(0);
    strides.push_back(1);
    dils.push_back(1);
  }
  // cuDNN's "x" is the convolution's input: X, or (transposed) the output Y of the backward
  // pass; its "y" the other.
  set_tensor(who, e->x, dt, cudnn_x);
  set_tensor(who, e->y, dt, cudnn_y);
  std::vector<int> wd = cudnn_dims(who, w_shape);
  ONYX_CUDNN_CHECK(cudnnCreateFilterDescriptor(&e->w));
  ONYX_CUDNN_CHECK(cudnnSetFilterNdDescriptor(e->w, cudnn_type(dt), CUDNN_TENSOR_NCHW,
                                              static_cast<int>(wd.size()), wd.data()));
  ONYX_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&e->conv));
  ONYX_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(
      e->conv, static_cast<int>(pads.size()), pads.data(), strides.data(), dils.data(),
      CUDNN_CROSS_CORRELATION, dt == DataType::Double ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT));
  ONYX_CUDNN_CHECK(cudnnSetConvolutionGroupCount(e->conv, static_cast<int>(g.G)));
  ONYX_CUDNN_CHECK(cudnnSetConvolutionMathType(e->conv, wanted_math(dt)));

  // The forward convolution these descriptors describe must map its input onto its output:
  // (padded) X onto Y, or (transposed) the output buffer onto X.
  {
    std::vector<int> expect = cudnn_dims(who, transpose ? x_shape : y_shape), got(expect.size());
    ONYX_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(
        e->conv, transpose ? e->y : e->x, e->w, static_cast<int>(got.size()), got.data()));
    ONYX_CHECK(got == expect, "[{}] cuDNN computes output dims [{}] where ONNX's are [{}]", who,
               fmt::join(got, ", "), fmt::join(expect, ", "));
  }

  // The heuristic's results, fastest first; take the first that succeeds within the limits.
  bool found = false;
  auto consider = [&](int algo, cudnnStatus_t status, cudnnMathType_t math, auto&& ws_query) {
    if (found || status != CUDNN_STATUS_SUCCESS || !math_allowed(dt, math)) return;
    const cudnnMathType_t use = dt == DataType::Float && !tf32_enabled() ? CUDNN_FMA_MATH : math;
    if (cudnnSetConvolutionMathType(e->conv, use) != CUDNN_STATUS_SUCCESS) return;
    size_t ws = 0;
    if (ws_query(algo, &ws) != CUDNN_STATUS_SUCCESS || ws > kMaxConvWorkspace) return;
    e->algo = algo;
    e->workspace = ws;
    found = true;
  };
  if (!transpose) {
    int max_count = 0;
    ONYX_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(std::max(1, max_count)));
    int n = 0;
    ONYX_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithm_v7(
        h, e->x, e->w, e->conv, e->y, static_cast<int>(perf.size()), &n, perf.data()));
    for (int i = 0; i < n; ++i)
      consider(perf[i].algo, perf[i].status, perf[i].mathType, [&](int algo, size_t* ws) {
        return cudnnGetConvolutionForwardWorkspaceSize(
            h, e->x, e->w, e->conv, e->y, static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws);
      });
  } else {
    int max_count = 0;
    ONYX_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(std::max(1, max_count)));
    int n = 0;
    // Backward data: "dy" is ONNX's X (cuDNN's e->x), "dx" the output buffer (e->y).
    ONYX_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithm_v7(
        h, e->w, e->x, e->conv, e->y, static_cast<int>(perf.size()), &n, perf.data()));
    for (int i = 0; i < n; ++i)
      consider(perf[i].algo, perf[i].status, perf[i].mathType, [&](int algo, size_t* ws) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(
            h, e->w, e->x, e->conv, e->y, static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws);
      });
  }
  ONYX_CHECK(found,
             "[{}] cuDNN has no {} algorithm for {} X {} and W {} within {} MiB of workspace",
             who, transpose ? "transposed-convolution" : "convolution", dtype_name(dt),
             shape_str(x_shape), shape_str(w_shape), kMaxConvWorkspace >> 20);
  return e;
}

enum class ConvOp { Conv, ConvTranspose, FusedConv };

/// One class for the three ops: they differ in geometry (ConvTranspose) and in what follows
/// the sum (FusedConv's Z and activation).
class ConvKernel final : public Kernel {
 public:
  ConvKernel(const KernelInfo& info, ConvOp op)
      : attrs_(info.node), op_(op), act_(parse_activation(info.node)) {}

  void compute(KernelContext& ctx) const override {
    const Tensor& X = ctx.required_input(0);
    const Tensor& W = ctx.required_input(1);
    const Tensor* B = ctx.input(2);
    const Tensor* Z = op_ == ConvOp::FusedConv ? ctx.input(3) : nullptr;
    check_conv_weights(ctx, X, W);
    const bool transpose = op_ == ConvOp::ConvTranspose;
    const Geometry g = transpose ? conv_transpose_geometry(ctx, attrs_, X.shape(), W)
                                 : conv_geometry(ctx, attrs_, X.shape(), W);
    check_conv_bias(ctx, X, B, g.M);
    Shape out{g.N, g.M};
    out.insert(out.end(), g.out.begin(), g.out.end());
    check_conv_residual(ctx, X, Z, out);
    Tensor& Y = ctx.allocate_output(0, X.dtype(), out);
    if (Y.numel() == 0) return;
    const DType dt = cv_dtype(X.dtype());
    cudaStream_t s = stream_of(ctx);
    const int64_t inner = Y.numel() / (g.N * g.M);
    if (X.numel() == 0 || W.numel() == 0) {  // nothing summed: the bias (or 0), then Z and act
      ONYX_CUDA_CHECK(cudaMemsetAsync(Y.raw(), 0, Y.nbytes(), s));
      epilogue(B, Z, Y, inner, g.M, dt, s);
      return;
    }
    CudnnLease handle(s);
    std::shared_ptr<const ConvEntry> e = entry(ctx, handle.get(), g, X, W);
    const int es = static_cast<int>(dtype_size(X.dtype()));
    const void* x = X.raw();
    Tensor x_buf, y_buf;
    if (e->pad_x) {
      x_buf = ctx.scratch(X.dtype(), e->x_buf);
      cv::launch_window_copy(x_buf.raw(), X.raw(), g.N * g.C, e->x_buf_dims, e->x_dims, e->x_off,
                             es, s);
      ONYX_CUDA_CHECK(cudaGetLastError());
      x = x_buf.raw();
    }
    void* y = Y.raw();
    if (e->crop_y) {
      y_buf = ctx.scratch(Y.dtype(), e->y_buf);
      y = y_buf.raw();
    }
    Tensor ws = workspace(ctx, e->workspace);
    const float one_f = 1.0f, zero_f = 0.0f;
    const double one_d = 1.0, zero_d = 0.0;
    const bool dbl = X.dtype() == DataType::Double;
    const void* one = dbl ? static_cast<const void*>(&one_d) : &one_f;
    const void* zero = dbl ? static_cast<const void*>(&zero_d) : &zero_f;
    if (!transpose)
      ONYX_CUDNN_CHECK(cudnnConvolutionForward(
          handle.get(), one, e->x, x, e->w, W.raw(), e->conv,
          static_cast<cudnnConvolutionFwdAlgo_t>(e->algo), ws.raw(), e->workspace, zero, e->y, y));
    else
      ONYX_CUDNN_CHECK(cudnnConvolutionBackwardData(
          handle.get(), one, e->w, W.raw(), e->x, x, e->conv,
          static_cast<cudnnConvolutionBwdDataAlgo_t>(e->algo), ws.raw(), e->workspace, zero, e->y,
          y));
    if (e->crop_y) {
      cv::launch_window_copy(Y.raw(), y_buf.raw(), g.N * g.M, e->y_dims, e->y_buf_dims, e->y_off,
                             es, s);
      ONYX_CUDA_CHECK(cudaGetLastError());
    }
    epilogue(B, Z, Y, inner, g.M, dt, s);
  }

 private:
  void epilogue(const Tensor* B, const Tensor* Z, Tensor& Y, int64_t inner, int64_t M, DType dt,
                cudaStream_t s) const {
    if (!B && !Z && act_.kind == Act::Kind::None) return;
    cv::launch_conv_epilogue(Y.raw(), B ? B->raw() : nullptr, Z ? Z->raw() : nullptr, Y.numel(),
                             inner, M, act_, dt, s);
    ONYX_CUDA_CHECK(cudaGetLastError());
  }

  std::shared_ptr<const ConvEntry> entry(KernelContext& ctx, cudnnHandle_t h, const Geometry& g,
                                         const Tensor& X, const Tensor& W) const {
    std::vector<int64_t> key{static_cast<int64_t>(X.dtype())};
    key.insert(key.end(), X.shape().begin(), X.shape().end());
    key.push_back(-1);
    key.insert(key.end(), W.shape().begin(), W.shape().end());
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(key);
      if (it != cache_.end()) return it->second;
    }
    // Built outside the lock (heuristic queries take milliseconds); a concurrent run that
    // built the same entry keeps the first.
    std::shared_ptr<const ConvEntry> e =
        make_entry(ctx.label(), h, g, X.dtype(), op_ == ConvOp::ConvTranspose, W.shape());
    std::lock_guard<std::mutex> lock(mu_);
    return cache_.emplace(key, e).first->second;
  }

  ConvAttrs attrs_;
  ConvOp op_;
  Act act_;
  mutable std::mutex mu_;
  mutable std::map<std::vector<int64_t>, std::shared_ptr<const ConvEntry>> cache_;
};

KernelFactory conv_factory(ConvOp op) {
  return [op](const KernelInfo& i) -> std::unique_ptr<Kernel> {
    return std::make_unique<ConvKernel>(i, op);
  };
}

}  // namespace

void register_conv_kernels(KernelRegistry& r) {
  const std::vector<DataType> types{DataType::Float, DataType::Float16, DataType::BFloat16,
                                    DataType::Double};
  r.add({.op_type = "Conv",
         .domain = "",
         .since = 1,
         .provider = kProvider,
         .types = types,
         .create = conv_factory(ConvOp::Conv)});
  r.add({.op_type = "ConvTranspose",
         .domain = "",
         .since = 1,
         .provider = kProvider,
         .types = types,
         .create = conv_factory(ConvOp::ConvTranspose)});
  r.add({.op_type = "FusedConv",
         .domain = "com.microsoft",
         .since = 1,
         .provider = kProvider,
         .types = types,
         .create = conv_factory(ConvOp::FusedConv)});
}

}  // namespace onyx::cuda
