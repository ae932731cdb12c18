// MatMul and Gemm shape arithmetic for every provider (kernels/matmul_shape.h).
#include "kernels/matmul_shape.h"

#include <algorithm>

namespace onyx {
namespace {

MatMulActivation parse_activation(const KernelInfo& info) {
  const std::string a = info.node.attr_string("activation", "none");
  if (a == "none") return MatMulActivation::None;
  if (a == "relu") return MatMulActivation::Relu;
  if (a == "gelu") return MatMulActivation::Gelu;
  if (a == "gelu_tanh") return MatMulActivation::GeluTanh;
  ONYX_THROW("[{}] attribute activation must be 'none', 'relu', 'gelu' or 'gelu_tanh', found '{}'",
             info.label(), a);
}

}  // namespace

MatMulShape matmul_shape(const std::string& who, const Shape& a, const Shape& b) {
  ONYX_CHECK(!a.empty() && !b.empty(), "[{}] MatMul inputs must have rank >= 1, got {} and {}", who,
             shape_str(a), shape_str(b));
  MatMulShape s;
  Shape a2 = a.size() == 1 ? Shape{1, a[0]} : a;
  Shape b2 = b.size() == 1 ? Shape{b[0], 1} : b;
  s.M = a2[a2.size() - 2];
  s.K = a2.back();
  s.N = b2.back();
  ONYX_CHECK(b2[b2.size() - 2] == s.K, "[{}] MatMul inner dims differ: A {} and B {}", who,
             shape_str(a), shape_str(b));
  size_t r = std::max(a2.size(), b2.size()) - 2;
  s.a_batch.assign(r, 1);
  s.b_batch.assign(r, 1);
  std::copy(a2.begin(), a2.end() - 2, s.a_batch.end() - (a2.size() - 2));
  std::copy(b2.begin(), b2.end() - 2, s.b_batch.end() - (b2.size() - 2));
  for (size_t i = 0; i < r; ++i) {
    int64_t x = s.a_batch[i], y = s.b_batch[i];
    ONYX_CHECK(x == y || x == 1 || y == 1, "[{}] MatMul batch dims do not broadcast: A {} and B {}",
               who, shape_str(a), shape_str(b));
    s.batch.push_back(x == 1 ? y : x);
  }
  s.out = s.batch;
  if (a.size() > 1) s.out.push_back(s.M);
  if (b.size() > 1) s.out.push_back(s.N);
  return s;
}

Shape logical_shape(Shape s, bool trans) {
  if (trans && s.size() >= 2) std::swap(s[s.size() - 1], s[s.size() - 2]);
  return s;
}

MatMulAttrs::MatMulAttrs(const KernelInfo& info)
    : alpha(info.node.attr_float("alpha", 1.0f)),
      trans_a(info.node.attr_int("transA", 0) != 0),
      trans_b(info.node.attr_int("transB", 0) != 0),
      bias(info.node.op_type == "FusedMatMulBias"),
      act(bias ? parse_activation(info) : MatMulActivation::None) {
  for (const char* a : {"transBatchA", "transBatchB"})
    if (info.node.attr_int(a, 0) != 0)
      throw NotImplemented(fmt::format("[{}] {} = 1 is not supported", info.label(), a));
  ONYX_CHECK(!bias || (alpha == 1.0f && !trans_a),
             "[{}] FusedMatMulBias takes neither alpha nor transA, found alpha {} and transA {}",
             info.label(), alpha, trans_a ? 1 : 0);
}

MatMulShape matmul_run_shape(const KernelContext& ctx, const MatMulAttrs& attrs, bool& ta,
                             bool& tb) {
  const Tensor& A = ctx.required_input(0);
  const Tensor& B = ctx.required_input(1);
  ONYX_CHECK(A.dtype() == B.dtype(), "[{}] A and B must have one dtype, got {} and {}",
             ctx.label(), dtype_name(A.dtype()), dtype_name(B.dtype()));
  ta = attrs.trans_a && A.rank() >= 2;
  tb = attrs.trans_b && B.rank() >= 2;
  MatMulShape s =
      matmul_shape(ctx.label(), logical_shape(A.shape(), ta), logical_shape(B.shape(), tb));
  if (attrs.bias) {
    const Tensor& bias = ctx.required_input(2);
    ONYX_CHECK(B.rank() == 2 && bias.dtype() == A.dtype() && bias.numel() == s.N &&
                   bias.rank() >= 1 && bias.dim(-1) == s.N,
               "[{}] FusedMatMulBias expects a 2-D B and a bias of {} [{}] (or [1, .., {}]), "
               "found B {} and bias {} {}",
               ctx.label(), dtype_name(A.dtype()), s.N, s.N, shape_str(B.shape()),
               dtype_name(bias.dtype()), shape_str(bias.shape()));
  }
  return s;
}

GemmShape gemm_shape(const KernelContext& ctx, bool trans_a, bool trans_b) {
  const Tensor& A = ctx.required_input(0);
  const Tensor& B = ctx.required_input(1);
  const Tensor* C = ctx.input(2);
  DataType dt = A.dtype();
  ONYX_CHECK(A.rank() == 2 && B.rank() == 2, "[{}] Gemm expects 2-D A and B, got {} and {}",
             ctx.label(), shape_str(A.shape()), shape_str(B.shape()));
  ONYX_CHECK(B.dtype() == dt && (!C || C->dtype() == dt),
             "[{}] A, B and C must have one dtype, got {}, {} and {}", ctx.label(), dtype_name(dt),
             dtype_name(B.dtype()), C ? dtype_name(C->dtype()) : "none");
  GemmShape g;
  g.M = trans_a ? A.dim(1) : A.dim(0);
  g.K = trans_a ? A.dim(0) : A.dim(1);
  int64_t Kb = trans_b ? B.dim(1) : B.dim(0);
  g.N = trans_b ? B.dim(0) : B.dim(1);
  ONYX_CHECK(g.K == Kb, "[{}] Gemm inner dims differ: A {} (transA={}) and B {} (transB={})",
             ctx.label(), shape_str(A.shape()), trans_a, shape_str(B.shape()), trans_b);
  if (C) {
    ONYX_CHECK(C->rank() <= 2, "[{}] C must have rank <= 2, got {}", ctx.label(),
               shape_str(C->shape()));
    g.cn = C->rank() >= 1 ? C->dim(-1) : 1;
    g.cm = C->rank() == 2 ? C->dim(0) : 1;
    ONYX_CHECK((g.cm == 1 || g.cm == g.M) && (g.cn == 1 || g.cn == g.N),
               "[{}] C of shape {} does not broadcast to [{}, {}]", ctx.label(),
               shape_str(C->shape()), g.M, g.N);
  }
  return g;
}

}  // namespace onyx
