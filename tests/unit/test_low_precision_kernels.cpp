// The 16-bit float path of the CPU kernels, checked against float32 (issue 13, mixed
// precision). Each case runs one node twice on the same values: once with float32 inputs
// holding values already rounded to bfloat16/float16, once with bfloat16/float16 inputs, and
// compares the outputs in float32. Sections:
//   Forward / Range   one node per op (Range: magnitudes where a 16-bit intermediate would
//                     overflow float16, -inf masks, NaN);
//   Backward          the graphs the gradient rules emit (autodiff::build_backward_graphs);
//   Accumulation      exact long sums: reductions, softmax, norms, pools and dot products
//                     accumulate in float32, not in the 16-bit type;
//   Fallback          oneDNN primitives without a native 16-bit kernel run in float32 and say
//                     so once per op type and dtype; which ISA takes which path;
//   Models            a CNN and a transformer block through the optimizer;
//   Cast              rounding between float32, float64 and the 16-bit formats.
// Models are validated as loaded ones are, so each imports the opset where ONNX admits
// bfloat16 for its op (opset_for).
//
// Tolerance rule (one rule for every comparison): with u the format's unit roundoff (2^-8 for
// bfloat16's 8-bit significand, 2^-11 for float16's 11 bits), an output element passes when
//   |low - ref| <= rtol * |ref| + atol,  rtol = c * u,  atol = c * u * scale,
// c = 2 for a forward node (the output's own rounding plus one more rounding inside the
// kernel), 8 for a backward graph and 16 for a model (chains of nodes, each rounding its
// output). The inputs are exactly representable in both runs, so a kernel that computes in
// float32 and rounds once differs from the reference by about u * |ref|; the reference is
// rounded to the format first, so a result past float16's range must be inf in both. `scale`
// bounds the absolute error where the output can cancel to near zero: 1 for elementwise ops
// on values of magnitude ~1; for a dot product or sum of K terms of magnitude m, sqrt(K) * m
// (rounding errors of the terms and any partial sums add up like a random walk). A 16-bit
// accumulator can stay inside that bound on random data, which is why the Accumulation tests
// check long sums exactly.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "autodiff/training_graph.h"
#include "graph/validate.h"
#include "kernels/cpu/dnnl_util.h"
#include "kernels/cpu/isa.h"
#include "graph/dispatch.h"
#include "test_util.h"

namespace onyx::test {
namespace {

// ---- inputs ---------------------------------------------------------------------------------

/// One node input: random floats in [lo, hi] (rounded to the format), fixed float values, or a
/// fixed input of another dtype (indices, shapes, axes, conditions).
struct In {
  std::string name;
  Shape shape;
  double lo = -1, hi = 1;
  DataType fixed = DataType::Undefined;  // Undefined: a float input of the run's dtype
  std::vector<double> values;            // given values (else random)
  bool omitted = false;
  bool keep_f32 = false;  // a random float input that stays float32 in the 16-bit run too
};
In F(std::string n, Shape s, double lo = -1, double hi = 1) {
  return {std::move(n), std::move(s), lo, hi};
}
In FV(std::string n, Shape s, std::vector<double> v) {
  In i{std::move(n), std::move(s)};
  i.values = std::move(v);
  return i;
}
In I64(std::string n, Shape s, std::vector<double> v) {
  In i{std::move(n), std::move(s)};
  i.fixed = DataType::Int64;
  i.values = std::move(v);
  return i;
}
In Bool(std::string n, Shape s, std::vector<double> v) {
  In i{std::move(n), std::move(s)};
  i.fixed = DataType::Bool;
  i.values = std::move(v);
  return i;
}
In F32(std::string n, Shape s, std::vector<double> v) {
  In i{std::move(n), std::move(s)};
  i.fixed = DataType::Float;
  i.values = std::move(v);
  return i;
}
/// A float32 input in both runs (mixed precision keeps e.g. BatchNormalization's statistics so).
In F32R(std::string n, Shape s, double lo = -1, double hi = 1) {
  In i = F(std::move(n), std::move(s), lo, hi);
  i.keep_f32 = true;
  return i;
}
In Omit() {
  In i;
  i.omitted = true;
  return i;
}

struct Case {
  std::string name, op;
  std::vector<In> ins;
  std::vector<Attribute> attrs;
  int outputs = 1;
  double scale = 1;  // atol multiplier, see the rule at the top
  int64_t opset = 21;
  bool bf16 = true;  // false: ONNX has no bfloat16 form of the op at `opset`
};

double unit_roundoff(DataType dt) { return dt == DataType::BFloat16 ? 0x1p-8 : 0x1p-11; }

float round_to(DataType dt, float x) {
  return dt == DataType::BFloat16 ? static_cast<float>(bfloat16(x))
                                  : static_cast<float>(float16(x));
}

/// A tensor of float dtype `dt` holding `v` (converted once, so exact when `v` is representable).
Tensor float_tensor(DataType dt, const Shape& s, const std::vector<float>& v) {
  Tensor t = Tensor::empty(dt, s);
  dispatch<FloatTypes>(dt, "test", [&]<typename T>() {
    T* p = t.data<T>();
    for (size_t i = 0; i < v.size(); ++i) p[i] = static_cast<T>(v[i]);
  });
  return t;
}

Tensor fixed_tensor(const In& in) {
  if (in.fixed == DataType::Bool) {
    Tensor t = Tensor::empty(DataType::Bool, in.shape);
    for (size_t i = 0; i < in.values.size(); ++i) t.data<bool>()[i] = in.values[i] != 0;
    return t;
  }
  if (in.fixed == DataType::Float) return T_<float>(in.shape, in.values);
  return T_<int64_t>(in.shape, in.values);
}

/// The values each float input takes, already rounded to `low` (so both runs see the same).
std::vector<std::vector<float>> draw(const std::vector<In>& ins, DataType low, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<float>> out;
  for (const In& in : ins) {
    std::vector<float> v;
    if (!in.omitted && in.fixed == DataType::Undefined) {
      std::uniform_real_distribution<double> u(in.lo, in.hi);
      for (int64_t i = 0; i < shape_numel(in.shape); ++i)
        v.push_back(round_to(low, static_cast<float>(in.values.empty() ? u(rng) : in.values[i])));
    }
    out.push_back(std::move(v));
  }
  return out;
}

/// Feeds for one run in float dtype `dt` (the float inputs; fixed ones are initializers).
NamedTensors feeds_for(const std::vector<In>& ins, const std::vector<std::vector<float>>& vals,
                       DataType dt) {
  NamedTensors f;
  for (size_t i = 0; i < ins.size(); ++i)
    if (!ins[i].omitted && ins[i].fixed == DataType::Undefined)
      f[ins[i].name] = float_tensor(ins[i].keep_f32 ? DataType::Float : dt, ins[i].shape, vals[i]);
  return f;
}

/// The opset a case's model imports: ONNX admits bfloat16 for these ops only from opset 22
/// (TopK from 24, Einsum from 28), so a 16-bit model of them must import at least that.
int64_t opset_for(const Case& c) {
  static const std::map<std::string, int64_t> since = {
      {"Conv", 22},        {"ConvTranspose", 22},     {"MaxPool", 22},
      {"AveragePool", 22}, {"GlobalAveragePool", 22}, {"InstanceNormalization", 22},
      {"Softplus", 22},    {"HardSigmoid", 22},       {"TopK", 24},
      {"Einsum", 28}};
  auto it = since.find(c.op);
  return it == since.end() ? c.opset : std::max(c.opset, it->second);
}

std::unique_ptr<Model> one_node(const Case& c, const NamedTensors& feeds, int outputs) {
  ModelBuilder b(opset_for(c));
  std::vector<std::string> ins, outs;
  for (const In& in : c.ins) {
    ins.push_back(in.omitted ? "" : in.name);
    // Indices, axes, shapes are constants, as in real models (gradient rules need them so).
    if (in.omitted) continue;
    if (in.fixed != DataType::Undefined)
      b.initializer(in.name, fixed_tensor(in));
    else
      b.input(in.name, feeds.at(in.name).dtype(), feeds.at(in.name).shape());
  }
  for (int i = 0; i < outputs; ++i) outs.push_back(fmt::format("y{}", i));
  set_attrs(b.node(c.op, ins, outs), c.attrs);
  for (const auto& o : outs) b.output(o);
  // As a loaded model would be: the 16-bit types must be ONNX-valid at the case's opset.
  auto m = b.build();
  validate_model(*m);
  return m;
}

/// Largest violation of the rule, as a message ("" when every element passes).
/// The reference is first rounded to the 16-bit output's format, so a float32 result past
/// float16's range is expected to overflow to inf as the 16-bit kernel's must.
std::string compare(const Tensor& low, const Tensor& ref, double rtol, double atol) {
  if (low.shape() != ref.shape())
    return fmt::format("shape {} vs float32 {}", shape_str(low.shape()), shape_str(ref.shape()));
  auto a = low.to_double_vector(), b = ref.to_double_vector();
  if (ref.dtype() == DataType::Float &&
      (low.dtype() == DataType::BFloat16 || low.dtype() == DataType::Float16))
    for (double& v : b) v = round_to(low.dtype(), static_cast<float>(v));
  double worst = 0;
  size_t at = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    double err = std::abs(a[i] - b[i]), tol = rtol * std::abs(b[i]) + atol;
    bool bad = !(err <= tol) && !(std::isinf(b[i]) && a[i] == b[i]) &&
               !(std::isnan(a[i]) && std::isnan(b[i]));
    if (bad && (worst == 0 || err / tol > worst)) worst = err / tol, at = i;
  }
  if (worst == 0) return "";
  return fmt::format("element {}: {} vs float32 {} (|diff| {:.3g} is {:.2f}x the tolerance)", at,
                     a[at], b[at], std::abs(a[at] - b[at]), worst);
}

// ---- forward --------------------------------------------------------------------------------

Attribute ints(const std::string& n, std::vector<int64_t> v) { return attr_ints(n, std::move(v)); }

std::vector<Case> forward_cases() {
  const double s96 = std::sqrt(96.0), s32 = std::sqrt(32.0);
  // The table is kept one case to a line or two, not bin-packed.
  // clang-format off
  return {
      // MatMul: K terms of magnitude <= 1.
      {"MatMul_2d", "MatMul", {F("a", {64, 96}), F("b", {96, 48})}, {}, 1, s96},
      {"MatMul_batched", "MatMul", {F("a", {3, 16, 32}), F("b", {3, 32, 24})}, {}, 1, s32},
      {"MatMul_broadcast_batch", "MatMul", {F("a", {2, 1, 8, 32}), F("b", {3, 32, 16})}, {}, 1, s32},
      {"MatMul_shared_weight", "MatMul", {F("a", {4, 8, 64}), F("b", {64, 32})}, {}, 1, 8},
      {"MatMul_1d_left", "MatMul", {F("a", {32}), F("b", {2, 32, 16})}, {}, 1, s32},
      {"MatMul_1d_right", "MatMul", {F("a", {4, 32}), F("b", {32})}, {}, 1, s32},
      {"MatMul_1d_both", "MatMul", {F("a", {32}), F("b", {32})}, {}, 1, s32},
      {"MatMul_one_row", "MatMul", {F("a", {1, 64}), F("b", {64, 40})}, {}, 1, 8},
      // Gemm: alpha * K terms + beta * C.
      {"Gemm_alpha_beta_C_row", "Gemm", {F("a", {16, 32}), F("b", {32, 24}), F("c", {24})},
       {attr_float("alpha", 0.5), attr_float("beta", 2.0)}, 1, s32},
      {"Gemm_transA_transB_C_col", "Gemm", {F("a", {32, 16}), F("b", {24, 32}), F("c", {16, 1})},
       {attr_int("transA", 1), attr_int("transB", 1)}, 1, s32},
      {"Gemm_C_full", "Gemm", {F("a", {16, 32}), F("b", {32, 24}), F("c", {16, 24})},
       {attr_int("transB", 0), attr_float("beta", -1.0)}, 1, s32},
      {"Gemm_C_scalar", "Gemm", {F("a", {8, 32}), F("b", {24, 32}), F("c", {})},
       {attr_int("transB", 1)}, 1, s32},
      {"Gemm_no_C", "Gemm", {F("a", {8, 32}), F("b", {32, 24})}, {attr_float("alpha", 2.0)}, 1, 2 * s32},
      {"Gemm_one_row", "Gemm", {F("a", {1, 64}), F("b", {64, 24}), F("c", {24})}, {}, 1, 8},
      // Conv: K = C/group * kernel size.
      {"Conv_2d_stride_pad_group_bias", "Conv",
       {F("x", {2, 4, 9, 9}), F("w", {6, 2, 3, 3}), F("b", {6})},
       {attr_int("group", 2), ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1})}, 1, std::sqrt(18.0)},
      {"Conv_2d_dilation", "Conv", {F("x", {1, 3, 10, 10}), F("w", {4, 3, 3, 3})},
       {ints("dilations", {2, 2}), ints("pads", {2, 1, 2, 1})}, 1, std::sqrt(27.0)},
      {"Conv_depthwise", "Conv", {F("x", {1, 8, 7, 7}), F("w", {8, 1, 3, 3}), F("b", {8})},
       {attr_int("group", 8), ints("pads", {1, 1, 1, 1})}, 1, 3},
      {"Conv_1d", "Conv", {F("x", {2, 3, 20}), F("w", {5, 3, 4}), F("b", {5})},
       {ints("strides", {2}), ints("pads", {1, 1})}, 1, std::sqrt(12.0)},
      {"Conv_resnet_3x3", "Conv", {F("x", {1, 16, 14, 14}), F("w", {16, 16, 3, 3})},
       {ints("pads", {1, 1, 1, 1})}, 1, 12},
      // ConvTranspose: each output sums at most C/group * kernel size terms.
      {"ConvTranspose_stride_output_padding", "ConvTranspose",
       {F("x", {1, 4, 5, 5}), F("w", {4, 3, 3, 3}), F("b", {3})},
       {ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1}), ints("output_padding", {1, 1})}, 1, 6},
      {"ConvTranspose_group", "ConvTranspose", {F("x", {2, 4, 6, 6}), F("w", {4, 2, 3, 3})},
       {attr_int("group", 2), ints("strides", {2, 2})}, 1, std::sqrt(18.0)},
      {"ConvTranspose_1d", "ConvTranspose", {F("x", {1, 3, 8}), F("w", {3, 2, 4})},
       {ints("strides", {2})}, 1, std::sqrt(12.0)},
      // Einsum.
      {"Einsum_bmm", "Einsum", {F("a", {2, 8, 16}), F("b", {2, 16, 8})},
       {attr_string("equation", "bij,bjk->bik")}, 1, 4},
      {"Einsum_attention_scores", "Einsum", {F("q", {1, 2, 8, 16}), F("k", {1, 2, 8, 16})},
       {attr_string("equation", "bhqd,bhkd->bhqk")}, 1, 4},
      {"Einsum_dot", "Einsum", {F("a", {64}), F("b", {64})}, {attr_string("equation", "i,i->")}, 1, 8},
      {"Einsum_reduce", "Einsum", {F("a", {3, 64, 5})}, {attr_string("equation", "bij->bj")}, 1, 8},
      // Elementwise.
      {"Add_broadcast", "Add", {F("a", {4, 1, 8}), F("b", {3, 1})}},
      {"Sub_broadcast", "Sub", {F("a", {4, 8}), F("b", {8})}},
      {"Mul_broadcast", "Mul", {F("a", {2, 3, 4}), F("b", {1})}},
      {"Div_broadcast", "Div", {F("a", {2, 3, 4}), F("b", {3, 1}, 0.5, 2)}},
      {"Relu", "Relu", {F("x", {4, 33})}},
      {"Gelu", "Gelu", {F("x", {4, 33}, -4, 4)}},
      {"Gelu_tanh", "Gelu", {F("x", {4, 33}, -4, 4)}, {attr_string("approximate", "tanh")}},
      {"Sigmoid", "Sigmoid", {F("x", {4, 33}, -6, 6)}},
      {"Tanh", "Tanh", {F("x", {4, 33}, -3, 3)}},
      {"Erf", "Erf", {F("x", {4, 33}, -3, 3)}},
      {"Sqrt", "Sqrt", {F("x", {4, 33}, 0, 4)}},
      {"Neg", "Neg", {F("x", {4, 33})}},
      {"Exp", "Exp", {F("x", {4, 33}, -3, 3)}},
      {"Log", "Log", {F("x", {4, 33}, 0.1, 4)}},
      {"Where", "Where", {Bool("c", {2, 1, 4}, {1, 0, 1, 1, 0, 0, 1, 0}), F("a", {3, 4}), F("b", {4})}},
      {"Clip", "Clip", {F("x", {4, 33}), FV("lo", {}, {-0.25}), FV("hi", {}, {0.5})}},
      {"Clip_max_only", "Clip", {F("x", {4, 33}), Omit(), FV("hi", {}, {0.5})}},
      {"Max", "Max", {F("a", {3, 4}), F("b", {4}), F("c", {2, 1, 1})}},
      {"Min", "Min", {F("a", {3, 4}), F("b", {4})}},
      {"LeakyRelu", "LeakyRelu", {F("x", {4, 33})}, {attr_float("alpha", 0.1)}},
      {"Softplus", "Softplus", {F("x", {4, 33}, -5, 5)}},
      // Softmax over long rows: one sum of 4096 terms per row.
      {"Softmax_long_row", "Softmax", {F("x", {4, 4096}, -8, 8)}, {attr_int("axis", -1)}},
      {"Softmax_axis1", "Softmax", {F("x", {2, 3, 5}, -4, 4)}, {attr_int("axis", 1)}},
      {"LogSoftmax_long_row", "LogSoftmax", {F("x", {4, 4096}, -8, 8)}, {attr_int("axis", -1)}},
      // Norms: the output is x_hat * scale + bias, terms of magnitude ~3.
      {"LayerNormalization_long_row", "LayerNormalization",
       {F("x", {4, 2048}, -2, 2), F("s", {2048}), F("b", {2048})}, {attr_int("axis", -1)}, 3, 3, 17},
      {"LayerNormalization_axis1", "LayerNormalization", {F("x", {2, 3, 8}), F("s", {3, 8})},
       {attr_int("axis", 1)}, 1, 3, 17},
      {"BatchNormalization_inference", "BatchNormalization",
       {F("x", {2, 3, 4, 4}), F("s", {3}), F("b", {3}), F("m", {3}), F("v", {3}, 0.5, 1.5)}, {}, 1, 3},
      {"BatchNormalization_training", "BatchNormalization",
       {F("x", {2, 3, 4, 4}), F("s", {3}), F("b", {3}), F("m", {3}), F("v", {3}, 0.5, 1.5)},
       {attr_int("training_mode", 1)}, 3, 3},
      {"GroupNormalization", "GroupNormalization", {F("x", {2, 6, 4, 4}), F("s", {6}), F("b", {6})},
       {attr_int("num_groups", 3)}, 1, 3},
      {"InstanceNormalization", "InstanceNormalization", {F("x", {2, 3, 5, 5}), F("s", {3}), F("b", {3})},
       {}, 1, 3},
      // Reductions.
      {"ReduceSum_axis", "ReduceSum", {F("x", {4, 6, 8}), I64("axes", {1}, {1})}, {}, 1, std::sqrt(6.0)},
      {"ReduceSum_all", "ReduceSum", {F("x", {4, 6, 8})}, {attr_int("keepdims", 0)}, 1, std::sqrt(192.0)},
      {"ReduceMean", "ReduceMean", {F("x", {4, 6, 8}), I64("axes", {2}, {0, 2})}},
      {"ReduceMax", "ReduceMax", {F("x", {4, 6, 8}), I64("axes", {1}, {-1})}, {attr_int("keepdims", 0)}},
      {"ReduceSumSquare", "ReduceSumSquare", {F("x", {4, 6, 8}), I64("axes", {1}, {1})}, {}, 1, std::sqrt(6.0)},
      // Data movement.
      {"Transpose", "Transpose", {F("x", {4, 6, 8})}, {ints("perm", {2, 0, 1})}},
      {"Reshape", "Reshape", {F("x", {4, 6, 8}), I64("shape", {2}, {8, -1})}},
      {"Concat", "Concat", {F("a", {2, 3, 4}), F("b", {2, 5, 4})}, {attr_int("axis", 1)}},
      {"Split", "Split", {F("x", {2, 5, 4}), I64("split", {2}, {2, 3})}, {attr_int("axis", 1)}, 2},
      {"Slice", "Slice",
       {F("x", {6, 8}), I64("starts", {2}, {1, 7}), I64("ends", {2}, {5, 0}), I64("axes", {2}, {0, 1}),
        I64("steps", {2}, {2, -2})}},
      {"Gather", "Gather", {F("x", {5, 4}), I64("i", {3}, {4, 0, -2})}, {attr_int("axis", 0)}},
      {"Gather_axis1", "Gather", {F("x", {3, 5, 4}), I64("i", {2, 2}, {1, 3, 3, 0})}, {attr_int("axis", 1)}},
      {"Expand", "Expand", {F("x", {3, 1}), I64("shape", {3}, {2, 3, 4})}},
      {"MaxPool", "MaxPool", {F("x", {1, 3, 8, 8})},
       {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1})}},
      {"AveragePool", "AveragePool", {F("x", {1, 3, 8, 8})},
       {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1})}},
      {"AveragePool_count_include_pad", "AveragePool", {F("x", {1, 3, 8, 8})},
       {ints("kernel_shape", {3, 3}), ints("pads", {1, 1, 1, 1}), attr_int("count_include_pad", 1)}},
      {"GlobalAveragePool", "GlobalAveragePool", {F("x", {2, 3, 16, 16})}},
      {"Dropout_inference", "Dropout", {F("x", {4, 33})}, {}, 2},
      {"Dropout_ratio0_training", "Dropout",
       {F("x", {4, 33}), F32("r", {}, {0.0}), Bool("t", {}, {1})}, {}, 2},
      {"Identity", "Identity", {F("x", {4, 33})}},
      {"Pad_constant", "Pad", {F("x", {3, 4}), I64("p", {4}, {1, 0, 2, 3}), FV("v", {}, {0.5})}},
      {"Pad_reflect", "Pad", {F("x", {3, 4}), I64("p", {4}, {1, 2, 1, 2})}, {attr_string("mode", "reflect")}},
      {"Tile", "Tile", {F("x", {2, 3}), I64("r", {2}, {2, 3})}},
      {"CumSum", "CumSum", {F("x", {4, 64}), I64("axis", {}, {1})}, {}, 1, 8},
      {"CumSum_exclusive_reverse", "CumSum", {F("x", {4, 64}), I64("axis", {}, {1})},
       {attr_int("exclusive", 1), attr_int("reverse", 1)}, 1, 8},
      // Mixed precision keeps BatchNormalization's parameters and statistics in float32
      // (opset 15's T, T1, T2); the new running statistics stay float32.
      {"BatchNormalization_f32_params", "BatchNormalization",
       {F("x", {2, 3, 4, 4}), F32R("s", {3}), F32R("b", {3}), F32R("m", {3}), F32R("v", {3}, 0.5, 1.5)},
       {}, 1, 3},
      {"BatchNormalization_f32_params_training", "BatchNormalization",
       {F("x", {2, 3, 4, 4}), F32R("s", {3}), F32R("b", {3}), F32R("m", {3}), F32R("v", {3}, 0.5, 1.5)},
       {attr_int("training_mode", 1)}, 3, 3},
      // More ops that models and gradient graphs use.
      {"Sum_variadic", "Sum", {F("a", {3, 4}), F("b", {4}), F("c", {2, 1, 1})}, {}, 1, 2},
      {"Mean_variadic", "Mean", {F("a", {3, 4}), F("b", {4})}},
      {"Pow", "Pow", {F("a", {3, 4}, 0.25, 2), FV("e", {}, {2.0})}},
      {"Pow_half", "Pow", {F("a", {3, 4}, 0.25, 2), FV("e", {}, {0.5})}},
      {"Abs", "Abs", {F("x", {4, 33})}},
      {"Reciprocal", "Reciprocal", {F("x", {4, 33}, 0.5, 2)}},
      {"HardSigmoid", "HardSigmoid", {F("x", {4, 33}, -4, 4)}},
      {"ReduceL2", "ReduceL2", {F("x", {4, 6, 8}), I64("axes", {1}, {2})}, {}, 1, 3},
      {"ReduceLogSumExp", "ReduceLogSumExp", {F("x", {4, 6, 8}), I64("axes", {1}, {2})}, {}, 1, 3},
      {"ReduceMin", "ReduceMin", {F("x", {4, 6, 8}), I64("axes", {1}, {0})}},
      {"ReduceProd", "ReduceProd", {F("x", {4, 6, 3}, 0.5, 1.5), I64("axes", {1}, {2})}},
      {"Flatten", "Flatten", {F("x", {2, 3, 4})}, {attr_int("axis", 1)}},
      {"Squeeze", "Squeeze", {F("x", {2, 1, 4}), I64("a", {1}, {1})}},
      {"Unsqueeze", "Unsqueeze", {F("x", {2, 4}), I64("a", {1}, {1})}},
      {"ArgMax", "ArgMax", {F("x", {4, 33})}, {attr_int("axis", 1)}},
      {"TopK", "TopK", {F("x", {4, 33}), I64("k", {1}, {5})}, {}, 2},
      {"MaxPool_indices", "MaxPool", {F("x", {1, 3, 8, 8})}, {ints("kernel_shape", {2, 2}), ints("strides", {2, 2})}, 2},
      {"GatherElements", "GatherElements", {F("x", {3, 4}), I64("i", {2, 4}, {0, 2, 1, 0, 2, 2, 0, 1})},
       {attr_int("axis", 0)}},
      {"ScatterElements_add", "ScatterElements",
       {F("x", {3, 4}), I64("i", {2, 4}, {0, 2, 1, 0, 0, 2, 0, 1}), F("u", {2, 4})},
       {attr_int("axis", 0), attr_string("reduction", "add")}},
      {"ScatterND_add", "ScatterND",
       {F("x", {4, 600}), I64("i", {3, 1}, {1, 3, 0}), F("u", {3, 600})},
       {attr_string("reduction", "add")}},
      {"Less", "Less", {F("a", {4, 33}), F("b", {33})}},
      {"SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLoss",
       {F("x", {8, 10}, -3, 3), I64("t", {8}, {1, 0, 9, 3, 3, 7, 2, 5})}, {}, 1, 1},
      {"SoftmaxCrossEntropyLoss_none", "SoftmaxCrossEntropyLoss",
       {F("x", {8, 10}, -3, 3), I64("t", {8}, {1, 0, 9, 3, 3, 7, 2, 5})},
       {attr_string("reduction", "none")}, 2},
      // Geometry edges: odd matrix sizes (blocked/AMX tails), SAME_UPPER, negative pads.
      {"MatMul_odd_sizes", "MatMul", {F("a", {129, 257}), F("b", {257, 65})}, {}, 1, 16},
      {"Conv_same_upper_stride", "Conv", {F("x", {1, 5, 9, 7}), F("w", {3, 5, 2, 3})},
       {attr_string("auto_pad", "SAME_UPPER"), ints("strides", {2, 2})}, 1, std::sqrt(30.0)},
      {"ConvTranspose_output_shape_negative_pads", "ConvTranspose",
       {F("x", {1, 2, 4, 4}), F("w", {2, 3, 3, 3})}, {ints("strides", {2, 2}), ints("output_shape", {10, 10})},
       1, std::sqrt(18.0)},
      {"MaxPool_dilation_ceil", "MaxPool", {F("x", {1, 2, 9, 9})},
       {ints("kernel_shape", {2, 2}), ints("strides", {2, 2}), ints("dilations", {2, 2}), attr_int("ceil_mode", 1)}},
      {"AveragePool_ceil", "AveragePool", {F("x", {1, 2, 9, 9})},
       {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}), attr_int("ceil_mode", 1)}},
      {"Pad_edge", "Pad", {F("x", {3, 4}), I64("p", {4}, {1, 2, 1, 2})}, {attr_string("mode", "edge")}},
      {"Softmax_opset11_coerced", "Softmax", {F("x", {2, 3, 5}, -4, 4)}, {attr_int("axis", 1)}, 1, 1, 11, false},
      // Large, odd sizes: the vectorised and multi-threaded paths with their tails.
      {"Add_big_same_shape", "Add", {F("a", {517, 131}), F("b", {517, 131})}},
      {"Add_big_scalar", "Add", {F("a", {517, 131}), F("b", {})}},
      {"Mul_big_row", "Mul", {F("a", {517, 131}), F("b", {131})}},
      {"Sub_big_column", "Sub", {F("a", {517, 131}), F("b", {517, 1})}},
      {"Div_big_outer", "Div", {F("a", {7, 1, 131}), F("b", {1, 517, 1}, 0.5, 2)}},
      {"Relu_big", "Relu", {F("x", {517, 131})}},
      {"Gelu_big", "Gelu", {F("x", {517, 131}, -4, 4)}},
      {"Gelu_tanh_big", "Gelu", {F("x", {517, 131}, -4, 4)}, {attr_string("approximate", "tanh")}},
      {"Sigmoid_big", "Sigmoid", {F("x", {517, 131}, -6, 6)}},
      {"Tanh_big", "Tanh", {F("x", {517, 131}, -3, 3)}},
      {"Erf_big", "Erf", {F("x", {517, 131}, -3, 3)}},
      {"Exp_big", "Exp", {F("x", {517, 131}, -3, 3)}},
      {"Sqrt_big", "Sqrt", {F("x", {517, 131}, 0, 4)}},
      {"Neg_big", "Neg", {F("x", {517, 131})}},
      {"LeakyRelu_big", "LeakyRelu", {F("x", {517, 131})}, {attr_float("alpha", 0.1)}},
      {"Softplus_big", "Softplus", {F("x", {517, 131}, -5, 5)}},
      {"Clip_big", "Clip", {F("x", {517, 131}), FV("lo", {}, {-0.25}), FV("hi", {}, {0.5})}},
      {"Max_big", "Max", {F("a", {517, 131}), F("b", {131})}},
      {"Where_big", "Where", {Bool("c", {1, 4}, {1, 0, 0, 1}), F("a", {517, 1}), F("b", {517, 4})}},
      {"Softmax_big", "Softmax", {F("x", {300, 1000}, -8, 8)}},
      {"LayerNormalization_big", "LayerNormalization", {F("x", {300, 768}, -2, 2), F("s", {768}), F("b", {768})},
       {}, 1, 3, 17},
      {"ReduceSum_big_last", "ReduceSum", {F("x", {300, 1000}), I64("a", {1}, {1})}, {}, 1, 32},
      {"ReduceSum_big_first", "ReduceSum", {F("x", {1000, 300}), I64("a", {1}, {0})}, {}, 1, 32},
      {"ReduceMean_big_middle", "ReduceMean", {F("x", {30, 1000, 10}), I64("a", {1}, {1})}},
      {"Transpose_big", "Transpose", {F("x", {64, 130, 33})}, {ints("perm", {1, 2, 0})}},
  };
  // clang-format on
}

struct Param {
  Case c;
  DataType dt;
};

std::string param_name(const testing::TestParamInfo<Param>& p) {
  return p.param.c.name + (p.param.dt == DataType::BFloat16 ? "_bf16" : "_fp16");
}

std::vector<Param> with_dtypes(const std::vector<Case>& cases) {
  std::vector<Param> out;
  for (const Case& c : cases)
    for (DataType dt : {DataType::BFloat16, DataType::Float16})
      if (c.bf16 || dt != DataType::BFloat16) out.push_back({c, dt});
  return out;
}

/// A per-case seed, so each case draws its own values.
uint64_t seed_of(const std::string& s) {
  const uint64_t h = std::hash<std::string>{}(s);
  return h & 0xffffffffu;
}

class LowPrecisionForward : public testing::TestWithParam<Param> {};

/// Runs case `c` in float32 and in `low` on the same values and checks the rule.
void check_forward(const Case& c, DataType low) {
  auto vals = draw(c.ins, low, seed_of(c.name));
  NamedTensors f32 = feeds_for(c.ins, vals, DataType::Float), f16 = feeds_for(c.ins, vals, low);
  SessionOptions so;
  so.intra_op_threads = 2;
  auto ref = Session(one_node(c, f32, c.outputs), so).run(f32);
  auto got = Session(one_node(c, f16, c.outputs), so).run(f16);
  const double u = unit_roundoff(low);
  for (int i = 0; i < c.outputs; ++i) {
    std::string y = fmt::format("y{}", i);
    const Tensor& r = ref.at(y);
    // Float outputs follow the input dtype; others (masks, float32 statistics) keep theirs.
    const bool f32_stats = c.op == "LayerNormalization" || (c.op == "BatchNormalization" && i > 0);
    if (r.dtype() == DataType::Float && !f32_stats) {
      EXPECT_EQ(got.at(y).dtype(), low) << y;
    }
    EXPECT_EQ(compare(got.at(y), r, 2 * u, 2 * u * c.scale), "") << c.name << " output " << y;
  }
}

TEST_P(LowPrecisionForward, MatchesFloat32) { check_forward(GetParam().c, GetParam().dt); }

INSTANTIATE_TEST_SUITE_P(LowPrecision, LowPrecisionForward,
                         testing::ValuesIn(with_dtypes(forward_cases())), param_name);

/// Values of magnitude `mag` with every `every`-th one -inf (an attention mask).
std::vector<double> masked(int64_t n, double mag, int every) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<double> u(-mag, mag);
  std::vector<double> v;
  for (int64_t i = 0; i < n; ++i)
    v.push_back(i % every == 1 ? -std::numeric_limits<double>::infinity() : u(rng));
  return v;
}

// Inputs that fit float16 (max 65504) where a 16-bit intermediate would not: squares, sums
// and exponentials of large values, and -inf masks. The same harness and rule as above.
std::vector<Case> range_cases() {
  // The table is kept one case to a line or two, not bin-packed.
  // clang-format off
  return {
      {"LayerNormalization_large_values", "LayerNormalization",
       {F("x", {4, 512}, -1000, 1000), F("s", {512}), F("b", {512})}, {}, 3, 3, 17},
      {"LayerNormalization_large_offset", "LayerNormalization",
       {F("x", {4, 512}, 2000, 2100), F("s", {512}), F("b", {512})}, {}, 1, 3, 17},
      {"GroupNormalization_large_values", "GroupNormalization",
       {F("x", {2, 4, 16, 16}, -1000, 1000), F("s", {4}), F("b", {4})}, {attr_int("num_groups", 2)}, 1, 3},
      {"InstanceNormalization_large_values", "InstanceNormalization",
       {F("x", {2, 3, 16, 16}, -1000, 1000), F("s", {3}), F("b", {3})}, {}, 1, 3},
      {"BatchNormalization_training_large_values", "BatchNormalization",
       {F("x", {4, 3, 8, 8}, -1000, 1000), F("s", {3}), F("b", {3}), F("m", {3}), F("v", {3}, 0.5, 1.5)},
       {attr_int("training_mode", 1)}, 1, 3},
      {"ReduceL2_large_values", "ReduceL2", {F("x", {4, 64}, 200, 300), I64("a", {1}, {1})}},
      {"ReduceLogSumExp_large_values", "ReduceLogSumExp", {F("x", {4, 256}, 10, 20), I64("a", {1}, {1})}},
      {"ReduceMean_large_sum", "ReduceMean", {F("x", {4, 4096}, 1000, 2000), I64("a", {1}, {1})}},
      {"GlobalAveragePool_large_sum", "GlobalAveragePool", {F("x", {1, 2, 32, 32}, 1000, 2000)}},
      {"AveragePool_large_sum", "AveragePool", {F("x", {1, 2, 32, 32}, 10000, 20000)},
       {ints("kernel_shape", {4, 4}), ints("strides", {4, 4})}},
      {"Softmax_large_logits", "Softmax", {F("x", {4, 1024}, -30000, 30000)}},
      {"LogSoftmax_large_logits", "LogSoftmax", {F("x", {4, 1024}, -300, 300)}, {}, 1, 300},
      {"Softmax_masked", "Softmax", {FV("x", {4, 64}, masked(256, 8, 3))}},
      {"LogSoftmax_masked", "LogSoftmax", {FV("x", {4, 64}, masked(256, 8, 3))}, {}, 1, 8},
      {"Softmax_fully_masked_row", "Softmax", {FV("x", {2, 3}, {-INFINITY, -INFINITY, -INFINITY, 1, 2, 3})}},
      {"Sigmoid_saturating", "Sigmoid", {F("x", {4, 64}, -100, 100)}},
      {"Tanh_saturating", "Tanh", {F("x", {4, 64}, -100, 100)}},
      {"Gelu_saturating", "Gelu", {F("x", {4, 64}, -100, 100)}},
      {"Softplus_large", "Softplus", {F("x", {4, 64}, -100, 100)}},
      {"Exp_overflow", "Exp", {FV("x", {4}, {11.0, 12.0, 89.0, -200.0})}},
      {"SoftmaxCrossEntropyLoss_large_logits", "SoftmaxCrossEntropyLoss",
       {F("x", {8, 10}, -1000, 1000), I64("t", {8}, {1, 0, 9, 3, 3, 7, 2, 5})}, {}, 1, 1000},
      {"MatMul_large_terms", "MatMul", {F("a", {8, 16}, -30, 30), F("b", {16, 8}, -30, 30)}, {}, 1, 3600},
      {"Relu_nan_inf", "Relu", {FV("x", {4}, {NAN, INFINITY, -INFINITY, -0.0})}},
      {"Max_nan", "Max", {FV("a", {3}, {NAN, 1.0, 2.0}), FV("b", {3}, {0.0, NAN, 3.0})}},
      {"ReduceMax_nan", "ReduceMax", {FV("x", {2, 3}, {1.0, NAN, 2.0, 4.0, 5.0, 6.0}), I64("a", {1}, {1})}},
  };
  // clang-format on
}

class LowPrecisionRange : public testing::TestWithParam<Param> {};
TEST_P(LowPrecisionRange, MatchesFloat32) { check_forward(GetParam().c, GetParam().dt); }
INSTANTIATE_TEST_SUITE_P(LowPrecision, LowPrecisionRange,
                         testing::ValuesIn(with_dtypes(range_cases())), param_name);

// ---- backward -------------------------------------------------------------------------------
// The gradient rules emit plain ONNX ops in the forward's dtype; the backward of a 16-bit node
// must run (every emitted op has a 16-bit kernel) and agree with the float32 backward on the
// same values. `scale` bounds the sums the backward does (e.g. dB of a MatMul sums M terms).

struct GradCase {
  Case c;
  std::vector<std::string> wrt;
};

std::vector<GradCase> backward_cases() {
  const double s32 = std::sqrt(32.0);
  // The table is kept one case to a line or two, not bin-packed.
  // clang-format off
  return {
      {{"MatMul_2d", "MatMul", {F("a", {16, 32}), F("b", {32, 24})}, {}, 1, s32}, {"a", "b"}},
      {{"MatMul_broadcast_batch", "MatMul", {F("a", {2, 1, 8, 16}), F("b", {3, 16, 8})}, {}, 1, 6},
       {"a", "b"}},
      {{"MatMul_1d", "MatMul", {F("a", {16}), F("b", {16, 8})}, {}, 1, 4}, {"a", "b"}},
      {{"Gemm_trans_alpha_beta_C", "Gemm", {F("a", {32, 16}), F("b", {24, 32}), F("c", {24})},
        {attr_int("transA", 1), attr_int("transB", 1), attr_float("alpha", 0.5), attr_float("beta", 2.0)},
        1, s32},
       {"a", "b", "c"}},
      {{"Conv_2d_stride_pad_group_bias", "Conv", {F("x", {2, 4, 9, 9}), F("w", {6, 2, 3, 3}), F("b", {6})},
        {attr_int("group", 2), ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1})}, 1, std::sqrt(50.0)},
       {"x", "w", "b"}},
      {{"Conv_1d", "Conv", {F("x", {2, 3, 20}), F("w", {5, 3, 4})}, {ints("pads", {1, 1})}, 1, std::sqrt(38.0)},
       {"x", "w"}},
      {{"ConvTranspose_stride_output_padding_group", "ConvTranspose",
        {F("x", {1, 4, 5, 5}), F("w", {4, 2, 3, 3}), F("b", {4})},
        {attr_int("group", 2), ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1}),
         ints("output_padding", {1, 1})},
        1, std::sqrt(40.0)},
       {"x", "w", "b"}},
      {{"Einsum_bmm", "Einsum", {F("a", {2, 8, 16}), F("b", {2, 16, 8})},
        {attr_string("equation", "bij,bjk->bik")}, 1, 4},
       {"a", "b"}},
      {{"Einsum_attention_scores", "Einsum", {F("q", {1, 2, 8, 16}), F("k", {1, 2, 8, 16})},
        {attr_string("equation", "bhqd,bhkd->bhqk")}, 1, 4},
       {"q", "k"}},
      {{"Softmax", "Softmax", {F("x", {4, 256}, -4, 4)}, {attr_int("axis", -1)}}, {"x"}},
      {{"LogSoftmax", "LogSoftmax", {F("x", {4, 256}, -4, 4)}, {attr_int("axis", -1)}, 1, 4}, {"x"}},
      {{"LayerNormalization", "LayerNormalization", {F("x", {4, 256}, -2, 2), F("s", {256}), F("b", {256})},
        {attr_int("axis", -1)}, 1, 3, 17},
       {"x", "s", "b"}},
      {{"Gelu", "Gelu", {F("x", {4, 33}, -4, 4)}}, {"x"}},
      {{"Gelu_tanh", "Gelu", {F("x", {4, 33}, -4, 4)}, {attr_string("approximate", "tanh")}}, {"x"}},
      {{"Erf", "Erf", {F("x", {4, 33}, -3, 3)}}, {"x"}},
      {{"Add_broadcast", "Add", {F("a", {4, 1, 8}), F("b", {3, 1})}, {}, 1, s32}, {"a", "b"}},
      {{"Mul_broadcast", "Mul", {F("a", {4, 3, 8}), F("b", {3, 1})}, {}, 1, std::sqrt(32.0)}, {"a", "b"}},
      {{"Sigmoid", "Sigmoid", {F("x", {4, 33}, -4, 4)}}, {"x"}},
      {{"Tanh", "Tanh", {F("x", {4, 33}, -2, 2)}}, {"x"}},
      {{"Relu", "Relu", {F("x", {4, 33})}}, {"x"}},
      {{"Transpose", "Transpose", {F("x", {4, 6, 8})}, {ints("perm", {2, 0, 1})}}, {"x"}},
      {{"Reshape", "Reshape", {F("x", {4, 6, 8}), I64("shape", {2}, {8, -1})}}, {"x"}},
      {{"MaxPool", "MaxPool", {F("x", {1, 3, 8, 8})},
        {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1})}},
       {"x"}},
      {{"AveragePool", "AveragePool", {F("x", {1, 3, 8, 8})},
        {ints("kernel_shape", {3, 3}), ints("strides", {2, 2}), ints("pads", {1, 1, 1, 1})}},
       {"x"}},
      {{"GlobalAveragePool", "GlobalAveragePool", {F("x", {2, 3, 16, 16})}}, {"x"}},
      {{"BatchNormalization_training", "BatchNormalization",
        {F("x", {4, 3, 4, 4}), F("s", {3}), F("b", {3}), F("m", {3}), F("v", {3}, 0.5, 1.5)},
        {attr_int("training_mode", 1)}, 1, 8},
       {"x", "s", "b"}},
      // The rest of the forward table: whatever their rules emit must run in 16 bits too.
      {{"BatchNormalization_inference", "BatchNormalization",
        {F("x", {2, 3, 4, 4}), F("s", {3}), F("b", {3}), F("m", {3}), F("v", {3}, 0.5, 1.5)}, {}, 1, 6},
       {"x", "s", "b"}},
      {{"GroupNormalization", "GroupNormalization", {F("x", {2, 6, 4, 4}), F("s", {6}), F("b", {6})},
        {attr_int("num_groups", 3)}, 1, 6},
       {"x", "s", "b"}},
      {{"InstanceNormalization", "InstanceNormalization", {F("x", {2, 3, 5, 5}), F("s", {3}), F("b", {3})},
        {}, 1, 6},
       {"x", "s", "b"}},
      {{"Sub_broadcast", "Sub", {F("a", {4, 8}), F("b", {8})}, {}, 1, 2}, {"a", "b"}},
      {{"Div_broadcast", "Div", {F("a", {2, 3, 4}), F("b", {3, 1}, 0.5, 2)}, {}, 1, 4}, {"a", "b"}},
      {{"Sqrt", "Sqrt", {F("x", {4, 33}, 0.25, 4)}}, {"x"}},
      {{"Neg", "Neg", {F("x", {4, 33})}}, {"x"}},
      {{"Exp", "Exp", {F("x", {4, 33}, -2, 2)}}, {"x"}},
      {{"Log", "Log", {F("x", {4, 33}, 0.25, 4)}}, {"x"}},
      {{"Where", "Where", {Bool("c", {2, 1, 4}, {1, 0, 1, 1, 0, 0, 1, 0}), F("a", {3, 4}), F("b", {4})},
        {}, 1, 3},
       {"a", "b"}},
      {{"Clip", "Clip", {F("x", {4, 33}), FV("lo", {}, {-0.25}), FV("hi", {}, {0.5})}}, {"x"}},
      {{"Max", "Max", {F("a", {3, 4}), F("b", {4})}, {}, 1, 2}, {"a", "b"}},
      {{"Min", "Min", {F("a", {3, 4}), F("b", {4})}, {}, 1, 2}, {"a", "b"}},
      {{"LeakyRelu", "LeakyRelu", {F("x", {4, 33})}, {attr_float("alpha", 0.1)}}, {"x"}},
      {{"Softplus", "Softplus", {F("x", {4, 33}, -4, 4)}}, {"x"}},
      {{"ReduceSum", "ReduceSum", {F("x", {4, 6, 8}), I64("axes", {1}, {1})}}, {"x"}},
      {{"ReduceMean", "ReduceMean", {F("x", {4, 6, 8}), I64("axes", {2}, {0, 2})}}, {"x"}},
      {{"ReduceMax", "ReduceMax", {F("x", {4, 6, 8}), I64("axes", {1}, {-1})}, {attr_int("keepdims", 0)}},
       {"x"}},
      {{"ReduceSumSquare", "ReduceSumSquare", {F("x", {4, 6, 8}), I64("axes", {1}, {1})}}, {"x"}},
      {{"Concat", "Concat", {F("a", {2, 3, 4}), F("b", {2, 5, 4})}, {attr_int("axis", 1)}}, {"a", "b"}},
      {{"Split", "Split", {F("x", {2, 5, 4}), I64("split", {2}, {2, 3})}, {attr_int("axis", 1)}, 2}, {"x"}},
      {{"Slice", "Slice",
        {F("x", {6, 8}), I64("starts", {2}, {1, 7}), I64("ends", {2}, {5, 0}), I64("axes", {2}, {0, 1}),
         I64("steps", {2}, {2, -2})}},
       {"x"}},
      {{"Gather", "Gather", {F("x", {5, 4}), I64("i", {4}, {4, 0, -2, 0})}, {attr_int("axis", 0)}, 1, 2},
       {"x"}},
      {{"Expand", "Expand", {F("x", {3, 1}), I64("shape", {3}, {2, 3, 4})}, {}, 1, 3}, {"x"}},
      {{"Tile", "Tile", {F("x", {2, 3}), I64("r", {2}, {2, 3})}, {}, 1, 3}, {"x"}},
      {{"Pad", "Pad", {F("x", {3, 4}), I64("p", {4}, {1, 0, 2, 3})}}, {"x"}},
      {{"CumSum", "CumSum", {F("x", {4, 64}), I64("axis", {}, {1})}, {}, 1, 8}, {"x"}},
      {{"Identity", "Identity", {F("x", {4, 33})}}, {"x"}},
      {{"Dropout_inference", "Dropout", {F("x", {4, 33})}}, {"x"}},
      {{"Conv_dilation", "Conv", {F("x", {1, 3, 10, 10}), F("w", {4, 3, 3, 3})},
        {ints("dilations", {2, 2}), ints("pads", {2, 1, 2, 1})}, 1, 8},
       {"x", "w"}},
  };
  // clang-format on
}

struct GradParam {
  GradCase g;
  DataType dt;
};

/// The gradients of one run: forward, then backward seeded with `seeds` (one per output).
NamedTensors run_backward(const GradCase& gc, const NamedTensors& feeds, DataType dt,
                          const std::vector<std::vector<float>>& seeds,
                          std::vector<std::string>* grads) {
  auto bg = autodiff::build_backward_graphs(*one_node(gc.c, feeds, gc.c.outputs), gc.wrt);
  SessionOptions so;
  so.intra_op_threads = 2;
  Session fwd(std::move(bg.forward), so), bwd(std::move(bg.backward), so);
  NamedTensors avail = fwd.run(feeds);
  for (const auto& [k, v] : feeds) avail.emplace(k, v);
  EXPECT_EQ(bg.seeds.size(), seeds.size());
  for (size_t i = 0; i < bg.seeds.size() && i < seeds.size(); ++i)
    avail[bg.seeds[i]] = float_tensor(dt, avail.at(fmt::format("y{}", i)).shape(), seeds[i]);
  NamedTensors bfeeds;
  for (const auto& in : bwd.inputs()) bfeeds[in.name] = avail.at(in.name);
  *grads = bg.grads;
  return bwd.run(bfeeds);
}

class LowPrecisionBackward : public testing::TestWithParam<GradParam> {};

TEST_P(LowPrecisionBackward, MatchesFloat32) {
  const GradCase& gc = GetParam().g;
  const DataType low = GetParam().dt;
  auto vals = draw(gc.c.ins, low, seed_of(gc.c.name));
  NamedTensors f32 = feeds_for(gc.c.ins, vals, DataType::Float),
               f16 = feeds_for(gc.c.ins, vals, low);
  // The seeds: random, rounded, of the forward outputs' shapes.
  auto outs = Session(one_node(gc.c, f32, gc.c.outputs)).run(f32);
  std::vector<In> seed_ins;
  for (int i = 0; i < gc.c.outputs; ++i)
    seed_ins.push_back(F("seed", outs.at(fmt::format("y{}", i)).shape()));
  auto seed = draw(seed_ins, low, seed_of(gc.c.name) + 1);
  std::vector<std::string> names_ref, names_low;
  auto ref = run_backward(gc, f32, DataType::Float, seed, &names_ref);
  auto got = run_backward(gc, f16, low, seed, &names_low);
  ASSERT_EQ(names_ref, names_low);
  const double u = unit_roundoff(low);
  for (const auto& g : names_ref) {
    EXPECT_EQ(got.at(g).dtype(), low) << g;
    EXPECT_EQ(compare(got.at(g), ref.at(g), 8 * u, 8 * u * gc.c.scale), "")
        << gc.c.name << " " << g;
  }
}

std::vector<GradParam> grad_params() {
  std::vector<GradParam> out;
  for (const GradCase& g : backward_cases())
    for (DataType dt : {DataType::BFloat16, DataType::Float16}) out.push_back({g, dt});
  return out;
}

INSTANTIATE_TEST_SUITE_P(LowPrecision, LowPrecisionBackward, testing::ValuesIn(grad_params()),
                         [](const testing::TestParamInfo<GradParam>& p) {
                           return p.param.g.c.name +
                                  (p.param.dt == DataType::BFloat16 ? "_bf16" : "_fp16");
                         });

// ---- accumulation in float32 ----------------------------------------------------------------
// A 16-bit accumulator stops growing once the step is below half an ulp of the sum: adding
// ones sticks at 256 in bfloat16 and at 2048 in float16. Each case below sums far more terms
// than that, with exact answers, so only a float32 (or wider) accumulator passes.

const DataType kLow[] = {DataType::BFloat16, DataType::Float16};
const char* low_name(DataType dt) { return dt == DataType::BFloat16 ? "bf16" : "fp16"; }

Tensor filled(DataType dt, const Shape& s, float v) {
  return float_tensor(dt, s, std::vector<float>(static_cast<size_t>(shape_numel(s)), v));
}

/// Every element of `t` is `want` rounded to t's format (within `ulps` units of roundoff).
void expect_all(const Tensor& t, double want, const std::string& what, double ulps = 1) {
  const double tol = ulps * unit_roundoff(t.dtype()) * std::abs(want);
  auto v = t.to_double_vector();
  for (size_t i = 0; i < v.size(); ++i)
    if (!(std::abs(v[i] - want) <= tol)) {
      ADD_FAILURE() << what << " (" << low_name(t.dtype()) << "): element " << i << " is " << v[i]
                    << ", want " << want;
      return;
    }
}

TEST(LowPrecisionAccumulation, ReduceSumOfOnesIsExact) {
  for (DataType dt : kLow) {
    // 65536 = 2^16 is exact in bfloat16; float16 tops out at 65504, so it sums 16384.
    const int64_t n = dt == DataType::BFloat16 ? 65536 : 16384;
    auto all = run_op("ReduceSum", {{"x", filled(dt, {n}, 1)}}, {attr_int("keepdims", 0)});
    expect_all(all.at("y0"), double(n), "ReduceSum over one long axis", 0);
    // A strided reduction (over the outer axis) and a partial one.
    auto outer =
        run_op("ReduceSum", {{"x", filled(dt, {n / 8, 8}, 1)}, {"a", T_<int64_t>({1}, {0})}});
    expect_all(outer.at("y0"), double(n / 8), "ReduceSum over the outer axis", 0);
    auto sq =
        run_op("ReduceSumSquare", {{"x", filled(dt, {4, n / 4}, 1)}, {"a", T_<int64_t>({1}, {1})}});
    expect_all(sq.at("y0"), double(n / 4), "ReduceSumSquare", 0);
    auto l1 = run_op("ReduceL1", {{"x", filled(dt, {4, n / 4}, -1)}, {"a", T_<int64_t>({1}, {1})}});
    expect_all(l1.at("y0"), double(n / 4), "ReduceL1", 0);
  }
}

TEST(LowPrecisionAccumulation, ReduceMeanOfManyValues) {
  for (DataType dt : kLow) {
    // 0.375 * k is exact in float32 for every partial sum here, so any float32 accumulator
    // (whatever its order) gives 0.375 exactly; a 16-bit one sticks near 0.375 * 2^9 or 2^12.
    const float v = 0.375f;
    auto last =
        run_op("ReduceMean", {{"x", filled(dt, {3, 40000}, v)}, {"a", T_<int64_t>({1}, {1})}});
    expect_all(last.at("y0"), v, "ReduceMean over the last axis", 0);
    auto first =
        run_op("ReduceMean", {{"x", filled(dt, {40000, 3}, v)}, {"a", T_<int64_t>({1}, {0})}});
    expect_all(first.at("y0"), v, "ReduceMean over the first axis", 0);
    auto lse =
        run_op("ReduceLogSumExp", {{"x", filled(dt, {2, 4096}, 0)}, {"a", T_<int64_t>({1}, {1})}});
    expect_all(lse.at("y0"), std::log(4096.0), "ReduceLogSumExp");
  }
}

TEST(LowPrecisionAccumulation, SoftmaxOverLongRows) {
  for (DataType dt : kLow) {
    // Equal logits: every probability is 1/n = 2^-12, exact in both formats.
    Tensor x = filled(dt, {3, 4096}, 0.5f);
    expect_all(run_op("Softmax", {{"x", x}}).at("y0"), 1.0 / 4096, "Softmax", 0);
    expect_all(run_op("LogSoftmax", {{"x", x}}).at("y0"), -std::log(4096.0), "LogSoftmax");
    // The same along a non-last axis.
    Tensor xt = filled(dt, {4096, 3}, 0.5f);
    expect_all(run_op("Softmax", {{"x", xt}}, {attr_int("axis", 0)}).at("y0"), 1.0 / 4096,
               "Softmax over axis 0", 0);
  }
}

/// n values alternating mean - 1, mean + 1: mean `mean`, variance 1.
std::vector<float> alternating(int64_t n, float mean) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = mean + (i % 2 ? 1.0f : -1.0f);
  return v;
}

TEST(LowPrecisionAccumulation, NormsOverLongRows) {
  for (DataType dt : kLow) {
    const int64_t n = 8192;
    // Normalised values are exactly -1, +1 (variance 1, epsilon negligible at 1e-9); a 16-bit
    // sum of 8192 values near 3 would stick far below 3 * 8192.
    Tensor x = float_tensor(dt, {2, n}, [&] {
      auto a = alternating(n, 3), b = alternating(n, 3);
      a.insert(a.end(), b.begin(), b.end());
      return a;
    }());
    auto ln = run_op("LayerNormalization",
                     {{"x", x}, {"s", filled(dt, {n}, 1)}, {"b", filled(dt, {n}, 0)}},
                     {attr_float("epsilon", 1e-9)}, 3, 17);
    auto y = ln.at("y0").to_double_vector();
    for (size_t i = 0; i < y.size(); i += 997)
      EXPECT_NEAR(std::abs(y[i]), 1.0, 0.02) << "LayerNormalization " << low_name(dt);
    expect_all(ln.at("y1"), 3.0, "LayerNormalization Mean", 1);
    expect_all(ln.at("y2"), 1.0, "LayerNormalization InvStdDev", 2);

    Tensor x4 = float_tensor(dt, {1, 2, 64, 64}, [&] {
      auto a = alternating(4096, 3), b = alternating(4096, 3);
      a.insert(a.end(), b.begin(), b.end());
      return a;
    }());
    Tensor s2 = filled(dt, {2}, 1), b2 = filled(dt, {2}, 0);
    for (const char* op : {"InstanceNormalization", "GroupNormalization"}) {
      std::vector<Attribute> at = {attr_float("epsilon", 1e-9)};
      if (std::string(op) == "GroupNormalization") at.push_back(attr_int("num_groups", 2));
      auto r = run_op(op, {{"x", x4}, {"s", s2}, {"b", b2}}, at).at("y0").to_double_vector();
      for (size_t i = 0; i < r.size(); i += 997)
        EXPECT_NEAR(std::abs(r[i]), 1.0, 0.02) << op << " " << low_name(dt);
    }
    // BatchNormalization in training mode: batch mean 3 and variance 1 over 4096 values per
    // channel; the new running mean with momentum 0 is the batch mean.
    auto bn = run_op(
        "BatchNormalization",
        {{"x", x4}, {"s", s2}, {"b", b2}, {"m", filled(dt, {2}, 0)}, {"v", filled(dt, {2}, 1)}},
        {attr_int("training_mode", 1), attr_float("momentum", 0), attr_float("epsilon", 1e-9)}, 3);
    auto by = bn.at("y0").to_double_vector();
    for (size_t i = 0; i < by.size(); i += 997)
      EXPECT_NEAR(std::abs(by[i]), 1.0, 0.02) << "BatchNormalization " << low_name(dt);
    expect_all(bn.at("y1"), 3.0, "BatchNormalization running mean", 1);
    expect_all(bn.at("y2"), 1.0, "BatchNormalization running var", 2);
    expect_all(run_op("GlobalAveragePool", {{"x", x4}}).at("y0"), 3.0, "GlobalAveragePool", 1);
  }
}

TEST(LowPrecisionAccumulation, DotProductsOfOnes) {
  for (DataType dt : kLow) {
    const int64_t K = 4096;  // exact in both formats; a 16-bit sum sticks at 256 or 2048
    expect_all(
        run_op("MatMul", {{"a", filled(dt, {4, K}, 1)}, {"b", filled(dt, {K, 8}, 1)}}).at("y0"),
        double(K), "MatMul K=4096", 0);
    expect_all(
        run_op("MatMul", {{"a", filled(dt, {1, K}, 1)}, {"b", filled(dt, {K, 8}, 1)}}).at("y0"),
        double(K), "MatMul one row K=4096", 0);
    expect_all(run_op("MatMul", {{"a", filled(dt, {2, 3, K}, 1)}, {"b", filled(dt, {2, K, 5}, 1)}})
                   .at("y0"),
               double(K), "batched MatMul K=4096", 0);
    expect_all(run_op("Gemm", {{"a", filled(dt, {K, 4}, 1)}, {"b", filled(dt, {8, K}, 1)}},
                      {attr_int("transA", 1), attr_int("transB", 1)})
                   .at("y0"),
               double(K), "Gemm K=4096", 0);
    expect_all(run_op("Einsum", {{"a", filled(dt, {2, K}, 1)}, {"b", filled(dt, {2, K}, 1)}},
                      {attr_string("equation", "bk,bk->b")})
                   .at("y0"),
               double(K), "Einsum K=4096", 0);
    // Conv with C * kh * kw = 1024 * 2 * 2 = 4096 terms per output.
    expect_all(run_op("Conv", {{"x", filled(dt, {1, 1024, 3, 3}, 1)},
                               {"w", filled(dt, {2, 1024, 2, 2}, 1)}})
                   .at("y0"),
               double(K), "Conv 4096 terms", 0);
    expect_all(run_op("ConvTranspose", {{"x", filled(dt, {1, 4096, 2, 2}, 1)},
                                        {"w", filled(dt, {4096, 2, 1, 1}, 1)}})
                   .at("y0"),
               double(K), "ConvTranspose 4096 terms", 0);
    // CumSum: element i is i + 1 rounded to the format once, not a rounded running sum.
    auto cs = run_op("CumSum", {{"x", filled(dt, {K}, 1)}, {"a", T_<int64_t>({}, {0})}})
                  .at("y0")
                  .to_double_vector();
    for (int64_t i = 0; i < K; i += 7)
      ASSERT_EQ(cs[i], round_to(dt, float(i + 1))) << "CumSum " << low_name(dt) << " at " << i;
  }
}

// ---- the float32 fallback of oneDNN's primitives ---------------------------------------------

TEST(LowPrecisionFallback, SlowPathIsLoggedOncePerOpAndDtype) {
  auto sink = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  auto& sinks = spdlog::default_logger()->sinks();
  sinks.push_back(sink);
  const auto level = spdlog::get_level();
  spdlog::set_level(spdlog::level::info);
  namespace du = cpu::dnnl_util;
  std::vector<std::thread> ts;
  for (int i = 0; i < 4; ++i)
    ts.emplace_back([] {
      du::note_slow_path("LowPrecisionTestOp", DataType::BFloat16, "the test's reason");
      du::note_slow_path("LowPrecisionTestOp", DataType::Float16, "the test's reason");
    });
  for (auto& t : ts) t.join();
  spdlog::set_level(level);
  sinks.pop_back();
  int bf = 0, fp = 0;
  for (const auto& line : sink->last_formatted()) {
    if (line.find("LowPrecisionTestOp on bfloat16") != std::string::npos) ++bf;
    if (line.find("LowPrecisionTestOp on float16") != std::string::npos) ++fp;
    if (line.find("LowPrecisionTestOp") != std::string::npos) {
      EXPECT_NE(line.find("the test's reason"), std::string::npos) << line;
      EXPECT_NE(line.find("info"), std::string::npos) << line;
    }
  }
  EXPECT_EQ(bf, 1);
  EXPECT_EQ(fp, 1);
  EXPECT_TRUE(du::slow_path_noted("LowPrecisionTestOp", DataType::Float16));
  EXPECT_FALSE(du::slow_path_noted("LowPrecisionTestOp", DataType::Float));
}

// Where the fallback is taken depends on the CPU; these pin down each level: below
// AVX-512-BF16 (ONYX_ISA=avx2 or avx512) oneDNN 2.6 has no native bfloat16 primitives (none,
// or emulated ones 4.5x slower than float32), so bfloat16 MatMul and Conv run in float32 and
// say so; so they do on an Intel CPU with AVX-512-BF16 but without AMX, whose bf16 dot products
// are no faster than its float32 FMAs (unless ONYX_BF16_NATIVE=1); elsewhere (AMX, AMD's
// AVX-512-BF16) they must run natively (no conversion to float32). The note is process-wide, so
// on such a host any bfloat16 MatMul or Conv in this binary that fell back would fail here: a
// surprise slow path worth a look.
TEST(LowPrecisionFallback, WhichPathMatMulAndConvTake) {
  namespace du = cpu::dnnl_util;
  const DataType bf = DataType::BFloat16;
  run_op("MatMul", {{"a", filled(bf, {32, 64}, 1)}, {"b", filled(bf, {64, 32}, 1)}});
  run_op("Conv", {{"x", filled(bf, {1, 16, 8, 8}, 1)}, {"w", filled(bf, {16, 16, 3, 3}, 1)}});
  const cpu::Isa isa = cpu::active_isa();
  const char* native_env = std::getenv("ONYX_BF16_NATIVE");
  const bool native_asked = native_env && std::string(native_env) == "1";
  const bool float32 = isa < cpu::Isa::Avx512Bf16 ||
                       (isa == cpu::Isa::Avx512Bf16 && cpu::intel_cpu() && !native_asked);
  EXPECT_EQ(du::slow_path_noted("MatMul", bf), float32) << cpu::isa_name(isa);
  EXPECT_EQ(du::slow_path_noted("Conv", bf), float32) << cpu::isa_name(isa);
  // On AVX2 oneDNN offers only reference bf16 primitives, found when they are made: no gap
  // is known ahead there.
  if (isa >= cpu::Isa::Avx512) {
    EXPECT_EQ(du::low_precision_gap(bf) == du::LowPrecisionGap::None, !float32);
  }
}

// ---- whole models through the optimizer ------------------------------------------------------
// Real models carry their weights as initializers, and the optimizer then fuses (Conv+Relu,
// Conv+Add, MatMul+Add, the erf form of Gelu, Transpose into MatMul), packs constant weights and
// may switch convolutions to blocked layouts. The same small models run in float32 and in the
// 16-bit type at every optimization level; a chain of rounded nodes gets c = 16.

struct Net {
  std::string name;
  int64_t opset;
  std::vector<In> params;  // initializers (random or fixed values); "x" is the one input
  Shape x;
  std::function<void(ModelBuilder&)> nodes;  // reads "x", writes "y"
  double scale = 1;
};

std::vector<Net> nets() {
  return {
      {"cnn",
       22,
       {F("w1", {8, 3, 3, 3}, -0.5, 0.5), F("b1", {8}), F("w2", {8, 8, 3, 3}, -0.3, 0.3),
        F("b2", {8}), F("w3", {8, 10}), F("b3", {10})},
       {2, 3, 16, 16},
       [](ModelBuilder& b) {
         set_attrs(b.node("Conv", {"x", "w1", "b1"}, {"c1"}), {attr_ints("pads", {1, 1, 1, 1})});
         b.node("Relu", {"c1"}, {"r1"});
         set_attrs(b.node("MaxPool", {"r1"}, {"p1"}),
                   {attr_ints("kernel_shape", {2, 2}), attr_ints("strides", {2, 2})});
         set_attrs(b.node("Conv", {"p1", "w2", "b2"}, {"c2"}), {attr_ints("pads", {1, 1, 1, 1})});
         b.node("Add", {"c2", "p1"}, {"s2"});
         b.node("Relu", {"s2"}, {"r2"});
         b.node("GlobalAveragePool", {"r2"}, {"g"});
         b.node("Flatten", {"g"}, {"f"});
         b.node("Gemm", {"f", "w3", "b3"}, {"logits"});
         b.node("Softmax", {"logits"}, {"y"});
       },
       4},
      {"transformer_block",
       22,
       {F("ln_s", {64}), F("ln_b", {64}), F("wq", {64, 64}, -0.2, 0.2),
        F("wk", {64, 64}, -0.2, 0.2), F("wv", {64, 64}, -0.2, 0.2), FV("scale", {}, {0.125}),
        F("w1", {64, 128}, -0.2, 0.2), F("b1", {128}), FV("sqrt2", {}, {1.4142135}),
        FV("one", {}, {1.0}), FV("half", {}, {0.5}), F("w2", {128, 64}, -0.2, 0.2), F("b2", {64})},
       {2, 16, 64},
       [](ModelBuilder& b) {
         set_attrs(b.node("LayerNormalization", {"x", "ln_s", "ln_b"}, {"h"}),
                   {attr_int("axis", -1)});
         b.node("MatMul", {"h", "wq"}, {"q"});
         b.node("MatMul", {"h", "wk"}, {"k"});
         b.node("MatMul", {"h", "wv"}, {"v"});
         set_attrs(b.node("Transpose", {"k"}, {"kt"}), {attr_ints("perm", {0, 2, 1})});
         b.node("MatMul", {"q", "kt"}, {"qk"});
         b.node("Mul", {"qk", "scale"}, {"qks"});
         set_attrs(b.node("Softmax", {"qks"}, {"p"}), {attr_int("axis", -1)});
         b.node("MatMul", {"p", "v"}, {"att"});
         b.node("Add", {"att", "x"}, {"r1"});
         b.node("MatMul", {"r1", "w1"}, {"m1"});
         b.node("Add", {"m1", "b1"}, {"a1"});
         // Gelu in its erf form, which the optimizer fuses.
         b.node("Div", {"a1", "sqrt2"}, {"d"});
         b.node("Erf", {"d"}, {"e"});
         b.node("Add", {"e", "one"}, {"e1"});
         b.node("Mul", {"a1", "e1"}, {"g0"});
         b.node("Mul", {"g0", "half"}, {"g"});
         b.node("MatMul", {"g", "w2"}, {"m2"});
         b.node("Add", {"m2", "b2"}, {"a2"});
         b.node("Add", {"a2", "r1"}, {"y"});
       },
       8},
  };
}

Session net_session(const Net& n, const std::vector<std::vector<float>>& vals, DataType dt,
                    OptLevel level) {
  ModelBuilder b(n.opset);
  b.input("x", dt, n.x);
  for (size_t i = 0; i < n.params.size(); ++i)
    b.initializer(n.params[i].name, float_tensor(dt, n.params[i].shape, vals[i]));
  n.nodes(b);
  b.output("y");
  auto m = b.build();
  validate_model(*m);
  SessionOptions so;
  so.intra_op_threads = 2;
  so.opt_level = level;
  return Session(std::move(m), so);
}

TEST(LowPrecisionModels, MatchFloat32AtEveryOptimizationLevel) {
  for (const Net& n : nets())
    for (DataType low : kLow)
      for (OptLevel level : {OptLevel::None, OptLevel::Basic, OptLevel::All}) {
        SCOPED_TRACE(fmt::format("{} {} opt level {}", n.name, low_name(low), int(level)));
        auto vals = draw(n.params, low, seed_of(n.name));
        auto x = draw({F("x", n.x)}, low, seed_of(n.name) + 1)[0];
        auto ref = net_session(n, vals, DataType::Float, level)
                       .run({{"x", float_tensor(DataType::Float, n.x, x)}});
        auto got = net_session(n, vals, low, level).run({{"x", float_tensor(low, n.x, x)}});
        const double u = unit_roundoff(low);
        EXPECT_EQ(got.at("y").dtype(), low);
        EXPECT_EQ(compare(got.at("y"), ref.at("y"), 16 * u, 16 * u * n.scale), "");
      }
}

// ---- Cast -----------------------------------------------------------------------------------

TEST(LowPrecisionCast, RoundsToNearestEvenWithSpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  // Halfway cases, values past float16's range, float16 subnormals, signed zero, inf.
  const std::vector<float> xs = {0.0f,    -0.0f,    1.0f,     1.00390625f, 1.01171875f,
                                 -2.5f,   65504.0f, 65519.0f, 65520.0f,    1e5f,
                                 3.0e38f, 6.0e-8f,  1.0e-8f,  3.0e-5f,     1.0e-40f,
                                 inf,     -inf,     0.3f,     -1234.567f,  1.00048828125f};
  Tensor x = Tensor::from_vector<float>({static_cast<int64_t>(xs.size())}, xs);
  for (DataType low : kLow) {
    SCOPED_TRACE(low_name(low));
    Tensor y = run_op("Cast", {{"x", x}}, {attr_int("to", static_cast<int64_t>(low))}).at("y0");
    ASSERT_EQ(y.dtype(), low);
    auto got = y.to_double_vector();
    for (size_t i = 0; i < xs.size(); ++i) EXPECT_EQ(got[i], round_to(low, xs[i])) << xs[i];
    // Back to float32 is exact.
    Tensor back =
        run_op("Cast", {{"y", y}}, {attr_int("to", static_cast<int64_t>(DataType::Float))})
            .at("y0");
    EXPECT_EQ(back.to_double_vector(), got);
    // NaN stays NaN.
    Tensor nan = run_op("Cast", {{"x", Tensor::from_vector<float>({1}, {std::nanf("")})}},
                        {attr_int("to", static_cast<int64_t>(low))})
                     .at("y0");
    EXPECT_TRUE(std::isnan(nan.to_double_vector()[0]));
  }
  // Spot values by hand: ties go to even, float16 overflows to inf at 65520.
  Tensor bf = run_op("Cast", {{"x", x}}, {attr_int("to", static_cast<int64_t>(DataType::BFloat16))})
                  .at("y0");
  EXPECT_EQ(bf.to_double_vector()[3], 1.0);       // 1 + 2^-8: a tie, to even
  EXPECT_EQ(bf.to_double_vector()[4], 1.015625);  // 1 + 3 * 2^-8: a tie, to even (up)
  Tensor h = run_op("Cast", {{"x", x}}, {attr_int("to", static_cast<int64_t>(DataType::Float16))})
                 .at("y0");
  EXPECT_EQ(h.to_double_vector()[7], 65504.0);
  EXPECT_TRUE(std::isinf(h.to_double_vector()[8]));
  EXPECT_EQ(h.to_double_vector()[11], 0x1p-24);  // the smallest subnormal
  EXPECT_EQ(h.to_double_vector()[19], 1.0);      // 1 + 2^-11: a tie, to even
}

TEST(LowPrecisionCast, BetweenTheSixteenBitFormats) {
  // Every bfloat16 bit pattern to float16 and back through the kernels, against a single
  // rounding of the exact value (float32 holds both formats exactly).
  std::vector<float> all;
  for (uint32_t b = 0; b < 65536; ++b) {
    float v = static_cast<float>(bfloat16::from_bits(static_cast<uint16_t>(b)));
    if (!std::isnan(v)) all.push_back(v);
  }
  const int64_t n = static_cast<int64_t>(all.size());
  Tensor bf = float_tensor(DataType::BFloat16, {n}, all);
  auto h = run_op("Cast", {{"x", bf}}, {attr_int("to", static_cast<int64_t>(DataType::Float16))})
               .at("y0")
               .to_double_vector();
  for (int64_t i = 0; i < n; ++i)
    ASSERT_EQ(h[i], static_cast<float>(float16(all[i]))) << "bfloat16 " << all[i] << " to float16";
  std::vector<float> halves;
  for (uint32_t b = 0; b < 65536; ++b) {
    float v = float16::to_float(static_cast<uint16_t>(b));
    if (!std::isnan(v)) halves.push_back(v);
  }
  const int64_t m = static_cast<int64_t>(halves.size());
  auto r = run_op("Cast", {{"x", float_tensor(DataType::Float16, {m}, halves)}},
                  {attr_int("to", static_cast<int64_t>(DataType::BFloat16))})
               .at("y0")
               .to_double_vector();
  for (int64_t i = 0; i < m; ++i)
    ASSERT_EQ(r[i], static_cast<float>(bfloat16(halves[i])))
        << "float16 " << halves[i] << " to bfloat16";
  // CastLike follows its second input's dtype.
  auto cl = run_op("CastLike", {{"x", bf}, {"t", filled(DataType::Float16, {1}, 0)}}).at("y0");
  EXPECT_EQ(cl.dtype(), DataType::Float16);
}

TEST(LowPrecisionCast, FromDoubleRoundsThroughFloat32LikePyTorch) {
  // 1 + 2^-8 + 2^-30 is just above a bfloat16 tie: one rounding would give 1 + 2^-7, but
  // float64 -> bfloat16 goes through float32 (as c10::BFloat16 and ml_dtypes do), which lands
  // on the tie (1 + 2^-8) and then on the even neighbour, 1. Pinned so it stays like PyTorch.
  const double v = 1.0 + 0x1p-8 + 0x1p-30;
  for (DataType low : kLow) {
    auto y = run_op("Cast", {{"x", Tensor::from_vector<double>({1}, {v})}},
                    {attr_int("to", static_cast<int64_t>(low))})
                 .at("y0")
                 .to_double_vector();
    EXPECT_EQ(y[0], round_to(low, static_cast<float>(v))) << low_name(low);
  }
}

}  // namespace
}  // namespace onyx::test
