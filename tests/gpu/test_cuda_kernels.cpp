// The CUDA provider op by op: one table of single-node models (op, domain, opset, attributes,
// inputs with their dtypes, shapes and value ranges). Each row runs in a session with
// providers {"cuda", "cpu"} and in a CPU-only session on the same inputs; every output
// element must agree within the row's tolerance, and placement() must show the op on "cuda"
// (a row whose node silently falls back to the CPU fails). Then: copy nodes where values
// cross devices, concurrent runs, and the "no CUDA device" error, which is checked in every
// build and on every machine. Without a device the rest is skipped, with the reason
// (ONYX_CUDA_TEST_CPU_REFERENCE=1: each row's CPU reference still runs, then it skips;
// scripts/gpu_check.sh prepare checks the table so before a GPU machine is spent on it).
//
// Tolerances (CPU output w, CUDA output g, S = root mean square of w's finite elements, for
// class Elem capped at 1): an element passes when |g - w| <= rtol * |w| + atol * S; NaN must
// meet NaN and an infinity the same infinity. Integer, bool and float8 outputs, and rows of
// class Exact, must match exactly.
//
//   class   ops                                  float32 rtol/atol  float16        bfloat16
//   Elem    elementwise maps, activations        1e-5 / 1e-6        2e-3 / 1e-3    1.6e-2 / 8e-3
//   Accum   reductions, softmax, norms, avg pool 1e-4 / 1e-5        5e-3 / 2e-3    3e-2 / 1.6e-2
//   Matrix  MatMul, Gemm, Conv*, Attention       5e-3 / 5e-3        5e-3 / 5e-3    2e-2 / 2e-2
//   Exact   data movement, casts, compares, max  bitwise (float: equal value, NaN meets NaN)
//
// Elem allows the few ulps by which CUDA's and the CPU's exp/log/tanh/erf differ (16-bit types:
// one rounding of the float result, 2 ulps). Accum allows another summation order. Matrix
// allows TF32 (10-bit mantissa products, float accumulation) for float32 matrix products and
// convolutions, which cuBLASLt and cuDNN may use, and for 16-bit types one or two roundings of
// the output or of an intermediate; a wrong element is off by O(S) and fails.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <thread>

#include "kernels/provider.h"
#include "tests/unit/test_util.h"

namespace onyx {
namespace {

using test::attr_float;
using test::attr_floats;
using test::attr_int;
using test::attr_ints;
using test::attr_string;
using test::ModelBuilder;

constexpr DataType F32 = DataType::Float, F16 = DataType::Float16, BF16 = DataType::BFloat16,
                   F64 = DataType::Double, I8 = DataType::Int8, U8 = DataType::UInt8,
                   I32 = DataType::Int32, I64 = DataType::Int64, BOOL = DataType::Bool,
                   E4M3 = DataType::Float8E4M3FN, E5M2 = DataType::Float8E5M2;
constexpr const char* kMs = "com.microsoft";

// ---------------------------------------------------------------------------------------------
// Is there a device? Asked once per process.

/// Empty when a CUDA device is usable; else the provider's "no CUDA device" message.
const std::string& no_device_reason() {
  static const std::string reason = []() -> std::string {
    try {
      make_cuda_provider(0);
      return "";
    } catch (const Error& e) {
      std::string what = e.what();
      if (what.find("no CUDA device") == std::string::npos)
        return "make_cuda_provider(0) failed with an error other than 'no CUDA device': " + what;
      return what;
    }
  }();
  return reason;
}

bool have_device() { return no_device_reason().empty(); }

#define SKIP_WITHOUT_DEVICE()                               \
  do {                                                      \
    if (!have_device()) GTEST_SKIP() << no_device_reason(); \
  } while (0)

// ---------------------------------------------------------------------------------------------
// Inputs: dtype, shape, and how their values are drawn.

enum class Gen {
  Normal,    // N(a, b^2)
  Uniform,   // U[a, b]
  Away,      // sign * U[0.5, 2]: divisors, reciprocals
  Int,       // integers in [a, b] (also as float values)
  Bool,      // true with probability a
  MaskRows,  // bool, true with probability 0.7, element 0 of every last-axis row true
  Bytes,     // every byte uniform: all float8 codes
  Values,    // `values` (float types, bool) or `ints` (integer types) as given
};

struct In {
  std::string name;  // "" marks an omitted optional input
  DataType dt = F32;
  Shape shape;
  Gen gen = Gen::Normal;
  double a = 0, b = 1;
  std::vector<double> values;
  std::vector<int64_t> ints;
  bool initializer = false;  // a constant of the model (as exporters write shape operands)
};

In X(DataType dt, Shape s, double scale = 1) {
  return {"", dt, std::move(s), Gen::Normal, 0, scale};
}
In Xm(DataType dt, Shape s, double mean, double scale) {
  return {"", dt, std::move(s), Gen::Normal, mean, scale};
}
In U(DataType dt, Shape s, double lo, double hi) {
  return {"", dt, std::move(s), Gen::Uniform, lo, hi};
}
In Pos(DataType dt, Shape s) { return U(dt, std::move(s), 0.1, 4); }
In Away(DataType dt, Shape s) { return {"", dt, std::move(s), Gen::Away}; }
In Int(DataType dt, Shape s, int64_t lo, int64_t hi) {
  return {"", dt, std::move(s), Gen::Int, double(lo), double(hi)};
}
In Bool(Shape s, double p = 0.5) { return {"", BOOL, std::move(s), Gen::Bool, p}; }
In Mask(Shape s) { return {"", BOOL, std::move(s), Gen::MaskRows}; }
In Bytes(DataType dt, Shape s) { return {"", dt, std::move(s), Gen::Bytes}; }
/// An int64 constant (an initializer): shapes, axes, pads, starts, repeats.
In K64(std::vector<int64_t> v) {
  In in{"", I64, {int64_t(v.size())}, Gen::Values};
  in.ints = std::move(v);
  in.initializer = true;
  return in;
}
/// The same, fed at run time (the session copies it to the host for the kernel).
In Fed64(std::vector<int64_t> v) {
  In in = K64(std::move(v));
  in.initializer = false;
  return in;
}
/// A constant of a float type or bool: Clip's bounds, Pad's value, weights given exactly.
In Kv(DataType dt, Shape s, std::vector<double> v) {
  In in{"", dt, std::move(s), Gen::Values};
  in.values = std::move(v);
  in.initializer = true;
  return in;
}
/// An int constant of another type or shape (ScatterND indices).
In Ki(DataType dt, Shape s, std::vector<int64_t> v) {
  In in{"", dt, std::move(s), Gen::Values};
  in.ints = std::move(v);
  in.initializer = true;
  return in;
}
/// Any input made an initializer (constant weights).
In Const(In in) {
  in.initializer = true;
  return in;
}
In None() { return {"", DataType::Undefined, {}, Gen::Values, 0, 0, {}, {}, false}; }
bool omitted(const In& in) { return in.dt == DataType::Undefined; }

enum class Tol { Exact, Elem, Accum, Matrix };

struct Bound {
  double rtol, atol;
};

Bound bound(Tol tol, DataType dt) {
  auto pick = [&](Bound f32, Bound f16, Bound bf16) {
    if (dt == F16) return f16;
    if (dt == BF16) return bf16;
    return f32;  // float32, and float64 held to the float32 bound
  };
  switch (tol) {
    case Tol::Exact:
      return {0, 0};
    case Tol::Elem:
      return pick({1e-5, 1e-6}, {2e-3, 1e-3}, {1.6e-2, 8e-3});
    case Tol::Accum:
      return pick({1e-4, 1e-5}, {5e-3, 2e-3}, {3e-2, 1.6e-2});
    case Tol::Matrix:
      return pick({5e-3, 5e-3}, {5e-3, 5e-3}, {2e-2, 2e-2});
  }
  return {0, 0};
}

/// Builds the CPU reference graph when the CPU has no kernel for the op (inputs and
/// outputs named as in the row's model).
using RefGraph = std::function<void(ModelBuilder&, const std::vector<std::string>& ins,
                                    const std::vector<std::string>& outs)>;

struct Row {
  std::string op, domain;
  int64_t opset = 21;
  std::vector<In> ins;
  std::vector<Attribute> attrs;
  int outputs = 1;
  Tol tol = Tol::Elem;
  std::string tag;
  RefGraph reference;

  Row& a(Attribute at) {
    attrs.push_back(std::move(at));
    return *this;
  }
  Row& set(int64_t opset_) {
    opset = opset_;
    return *this;
  }
  Row& ms() {
    domain = kMs;
    return *this;
  }
  Row& outs(int n) {
    outputs = n;
    return *this;
  }
  Row& t(Tol t_) {
    tol = t_;
    return *this;
  }
  Row& named(std::string s) {
    tag = std::move(s);
    return *this;
  }
  Row& ref(RefGraph r) {
    reference = std::move(r);
    return *this;
  }
};

std::string short_name(DataType dt) {
  switch (dt) {
    case F32:
      return "f32";
    case F16:
      return "f16";
    case BF16:
      return "bf16";
    case F64:
      return "f64";
    case E4M3:
      return "e4m3";
    case E5M2:
      return "e5m2";
    default:
      return dtype_name(dt);
  }
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

/// What gtest prints for a row (instead of its bytes).
void PrintTo(const Row& r, std::ostream* os) {
  *os << (r.domain.empty() ? "" : r.domain + ".") << r.op << " opset " << r.opset << " (";
  for (size_t i = 0; i < r.ins.size(); ++i) {
    const In& in = r.ins[i];
    *os << (i ? ", " : "");
    if (omitted(in))
      *os << "-";
    else
      *os << dtype_name(in.dt) << shape_str(in.shape) << (in.initializer ? " const" : "");
  }
  *os << ")";
  for (const Attribute& a : r.attrs) *os << " " << a.name;
}

// ---------------------------------------------------------------------------------------------
// The table.

class Table {
 public:
  Row& add(std::string op, std::vector<In> ins, Tol tol = Tol::Elem) {
    Row r;
    r.op = std::move(op);
    r.ins = std::move(ins);
    r.tol = tol;
    rows_.push_back(std::move(r));
    return rows_.back();
  }
  std::vector<Row> take() { return std::move(rows_); }

 private:
  std::vector<Row> rows_;
};

void elementwise_rows(Table& t) {
  // Unary maps, each over float32 [4097], float16 [7, 1023], bfloat16 [3, 1, 33].
  struct Unary {
    const char* op;
    Gen gen;
    double a, b;
  };
  const Unary unary[] = {
      {"Relu", Gen::Normal, 0, 1},     {"Neg", Gen::Normal, 0, 1},
      {"Abs", Gen::Normal, 0, 1},      {"Exp", Gen::Normal, 0, 2},
      {"Log", Gen::Uniform, 0.1, 4},   {"Sqrt", Gen::Uniform, 0.1, 4},
      {"Reciprocal", Gen::Away, 0, 0}, {"Sigmoid", Gen::Normal, 0, 3},
      {"Tanh", Gen::Normal, 0, 2},     {"Erf", Gen::Normal, 0, 1.5},
      {"Sin", Gen::Normal, 0, 3},      {"Cos", Gen::Normal, 0, 3},
      {"Floor", Gen::Normal, 0, 4},    {"Ceil", Gen::Normal, 0, 4},
      {"Round", Gen::Normal, 0, 4},    {"Sign", Gen::Int, -2, 2},
      {"Softplus", Gen::Normal, 0, 3},
  };
  for (const Unary& u : unary)
    for (const auto& [dt, shape] : std::initializer_list<std::pair<DataType, Shape>>{
             {F32, {4097}}, {F16, {7, 1023}}, {BF16, {3, 1, 33}}})
      t.add(u.op, {In{"", dt, shape, u.gen, u.a, u.b}});
  // Odd and empty shapes, scalars.
  for (const char* op : {"Relu", "Exp", "Sigmoid", "Tanh"}) {
    t.add(op, {X(F32, {0, 7})}).named("empty");
    t.add(op, {X(F32, {1})});
    t.add(op, {X(F32, {})}).named("scalar");
  }
  t.add("Abs", {Int(I32, {1023}, -1000, 1000)}, Tol::Exact);
  t.add("Neg", {Int(I64, {7, 33}, -1000, 1000)}, Tol::Exact);
  t.add("Relu", {Int(I32, {33}, -5, 5)}, Tol::Exact).set(14);
  // Activations with attributes.
  for (DataType dt : {F32, F16, BF16}) {
    t.add("LeakyRelu", {X(dt, {7, 1023})}).a(attr_float("alpha", 0.1));
    t.add("Elu", {X(dt, {1023})}).a(attr_float("alpha", 0.7));
    t.add("HardSigmoid", {X(dt, {4097}, 3)}).a(attr_float("alpha", 0.3)).a(attr_float("beta", 0.4));
    t.add("Clip", {X(dt, {7, 1023}), Kv(dt, {}, {-0.5}), Kv(dt, {}, {0.7})});
  }
  t.add("Clip", {X(F32, {4097}), Kv(F32, {}, {-0.25}), None()}).named("min_only");
  t.add("Clip", {X(F32, {4097}), None(), Kv(F32, {}, {0.25})}).named("max_only");
  // GELU: ai.onnx (opset 20, exact and tanh), com.microsoft Gelu and FastGelu (with a bias).
  for (DataType dt : {F32, F16, BF16}) {
    t.add("Gelu", {X(dt, {7, 1023}, 2)}).set(20);
    t.add("Gelu", {X(dt, {4097}, 2)}).set(20).a(attr_string("approximate", "tanh")).named("tanh");
    t.add("Gelu", {X(dt, {2, 7, 768}, 2)}).ms();
    t.add("FastGelu", {X(dt, {2, 7, 768}, 2)}).ms();
    t.add("FastGelu", {X(dt, {2, 7, 768}, 2), Const(X(dt, {768}))}).ms().named("bias");
  }
  t.add("Gelu", {X(F32, {0, 768})}).ms().named("empty");

  // Binary maps with broadcasting: same shape, a row, both sides, a scalar, empty, size 1,
  // two-sided rank growth, and a column.
  struct Pair {
    Shape a, b;
    const char* tag;
  };
  const Pair shapes[] = {
      {{4097}, {4097}, "same"},          {{7, 1023}, {1023}, "row"},
      {{7, 1, 33}, {1, 5, 1}, "both"},   {{2, 3, 4, 5}, {}, "scalar"},
      {{0, 3}, {1, 3}, "empty"},         {{1}, {1}, "one"},
      {{3, 1, 4, 1}, {2, 1, 6}, "rank"}, {{1023}, {7, 1}, "column"},
  };
  for (const char* op : {"Add", "Sub", "Mul", "Div"})
    for (const Pair& p : shapes)
      t.add(op, {X(F32, p.a), std::string(op) == "Div" ? Away(F32, p.b) : X(F32, p.b)})
          .named(p.tag);
  for (const char* op : {"Pow", "Max", "Min"})
    for (const Pair& p : {shapes[0], shapes[2]})
      t.add(op, {std::string(op) == "Pow" ? U(F32, p.a, 0.5, 2) : X(F32, p.a),
                 std::string(op) == "Pow" ? U(F32, p.b, -2, 2) : X(F32, p.b)})
          .named(p.tag);
  for (DataType dt : {F16, BF16})
    for (const char* op : {"Add", "Sub", "Mul", "Div", "Max"})
      for (const Pair& p : {shapes[1], shapes[2], shapes[6]})
        t.add(op, {X(dt, p.a), std::string(op) == "Div" ? Away(dt, p.b) : X(dt, p.b)}).named(p.tag);
  t.add("Pow", {U(F16, {7, 1023}, 0.5, 2), U(F16, {1023}, -2, 2)});
  t.add("PRelu", {X(F32, {2, 3, 7, 7}), Const(X(F32, {3, 1, 1}, 0.3))});
  t.add("PRelu", {X(F16, {4, 1023}), Const(X(F16, {1023}, 0.3))});
  // Variadic Max / Min / Sum / Mean over three broadcast inputs.
  for (const char* op : {"Max", "Min", "Sum", "Mean"})
    t.add(op, {X(F32, {7, 33}), X(F32, {33}), X(F32, {7, 1})}).named("three");
  // Integer arithmetic (shape arithmetic and index math run here too).
  t.add("Add", {Int(I64, {7, 1023}, -1000, 1000), Int(I64, {1023}, -1000, 1000)}, Tol::Exact);
  t.add("Sub", {Int(I32, {7, 1, 33}, -1000, 1000), Int(I32, {1, 5, 1}, -1000, 1000)}, Tol::Exact);
  t.add("Mul", {Int(I32, {4097}, -1000, 1000), Int(I32, {4097}, -1000, 1000)}, Tol::Exact);
  t.add("Div", {Int(I64, {7, 33}, -1000, 1000), Int(I64, {33}, 1, 9)}, Tol::Exact);
  t.add("Mod", {Int(I32, {7, 33}, -100, 100), Int(I32, {33}, 1, 7)}, Tol::Exact);
  t.add("Mod", {Int(I64, {7, 33}, -100, 100), Int(I64, {7, 1}, -7, -1)}, Tol::Exact).named("neg");
  t.add("Mod", {X(F32, {7, 33}, 10), Away(F32, {33})}).a(attr_int("fmod", 1));
  // Comparisons (integer-valued floats, so that equality happens) and logic.
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    t.add(op, {Int(F32, {7, 1, 33}, -3, 3), Int(F32, {1, 5, 33}, -3, 3)}, Tol::Exact);
    t.add(op, {Int(I64, {7, 1023}, -3, 3), Int(I64, {1023}, -3, 3)}, Tol::Exact);
  }
  t.add("Equal", {Int(F16, {4097}, -3, 3), Int(F16, {4097}, -3, 3)}, Tol::Exact);
  t.add("Less", {Int(BF16, {7, 33}, -3, 3), Int(BF16, {33}, -3, 3)}, Tol::Exact);
  t.add("Equal", {Int(I32, {7, 33}, -3, 3), Int(I32, {}, -3, 3)}, Tol::Exact);
  t.add("Equal", {Bool({7, 33}), Bool({33})}, Tol::Exact);
  for (const char* op : {"And", "Or", "Xor"})
    t.add(op, {Bool({7, 1, 33}), Bool({1, 5, 33})}, Tol::Exact);
  t.add("Not", {Bool({4097})}, Tol::Exact);
  // Where: condition, X and Y all broadcast.
  for (DataType dt : {F32, F16, BF16, I64, I32})
    t.add("Where", {Bool({7, 1, 33}), Int(dt, {1, 5, 33}, -100, 100), Int(dt, {33}, -100, 100)},
          Tol::Exact);
  t.add("Where", {Bool({4097}), X(F32, {4097}), X(F32, {})}, Tol::Exact).named("scalar_y");
  t.add("Where", {Bool({0, 3}), X(F32, {1, 3}), X(F32, {0, 1})}, Tol::Exact).named("empty");
  t.add("Where", {Bool({7, 33}), Bool({7, 33}), Bool({33})}, Tol::Exact);
}

void cast_rows(Table& t) {
  auto cast = [&](In in, DataType to) -> Row& {
    return t.add("Cast", {std::move(in)}, Tol::Exact)
        .a(attr_int("to", int64_t(to)))
        .named("to_" + short_name(to));
  };
  // 16-bit floats both ways; float32 past float16's range (inf) included.
  cast(X(F32, {7, 1023}, 1e4), F16);
  cast(X(F32, {4097}, 1e4), BF16);
  cast(X(F16, {4097}, 100), F32);
  cast(X(BF16, {7, 1023}, 100), F32);
  cast(X(F16, {1023}, 100), BF16);
  cast(X(BF16, {1023}, 100), F16);
  cast(X(F32, {1023}), F64);
  cast(X(F64, {1023}), F32);
  cast(X(F64, {1023}), F16);
  // Floats to integers truncate toward zero (values inside the target's range).
  cast(X(F32, {4097}, 100), I32);
  cast(X(F32, {4097}, 1e6), I64);
  cast(U(F32, {1023}, -128, 127), I8);
  cast(U(F32, {1023}, 0, 255), U8);
  cast(X(F16, {1023}, 100), I32);
  cast(Int(F32, {4097}, -2, 2), BOOL);
  // Integers and bool.
  cast(Int(I64, {4097}, -100000, 100000), F32);
  cast(Int(I32, {4097}, -100000, 100000), F16);
  cast(Int(I32, {1023}, -100000, 100000), I64);
  cast(Int(I64, {1023}, -100000, 100000), I32);
  cast(Int(U8, {1023}, 0, 255), F32);
  cast(Int(I8, {1023}, -128, 127), F32);
  cast(Int(I64, {1023}, -2, 2), BOOL);
  cast(Bool({1023}), F32);
  cast(Bool({1023}), I64);
  cast(X(F32, {0, 5}), F16).named("empty");
  // float8 (opset 19+: saturate, default 1, clamps to the largest finite value).
  cast(X(F32, {4097}, 200), E4M3);
  cast(X(F32, {4097}, 200), E4M3).a(attr_int("saturate", 0)).named("to_e4m3_nosat");
  cast(X(F32, {4097}, 3e4), E5M2);
  cast(X(F16, {1023}, 200), E4M3);
  cast(X(BF16, {1023}, 200), E5M2);
  cast(Bytes(E4M3, {256}), F32);
  cast(Bytes(E5M2, {256}), F32);
  cast(Bytes(E4M3, {1023}), F16);
  cast(Bytes(E5M2, {1023}), BF16);
}

void reduction_rows(Table& t) {
  const char* all[] = {"ReduceSum", "ReduceMean", "ReduceMax",       "ReduceMin",
                       "ReduceL1",  "ReduceL2",   "ReduceLogSumExp", "ReduceSumSquare"};
  for (const char* op : all) {
    t.add(op, {X(F32, {7, 4097}), K64({1})}, Tol::Accum).set(18);
    t.add(op, {X(F32, {3, 5, 1023}), K64({0, 2})}, Tol::Accum).set(18).a(attr_int("keepdims", 0));
  }
  t.add("ReduceProd", {U(F32, {7, 7}, 0.5, 1.5), K64({1})}, Tol::Accum).set(18);
  t.add("ReduceLogSum", {Pos(F32, {7, 1023}), K64({-1})}, Tol::Accum).set(18);
  for (DataType dt : {F16, BF16})
    for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceL2"})
      t.add(op, {X(dt, {4, 4097}), K64({-1})}, Tol::Accum).set(18);
  // Reduce everything, an empty axis, axes fed at run time, no axes with noop_with_empty_axes.
  t.add("ReduceSum", {X(F32, {4097}), None()}, Tol::Accum)
      .set(18)
      .a(attr_int("keepdims", 0))
      .named("all");
  t.add("ReduceMean", {X(F32, {7, 33, 5}), None()}, Tol::Accum).set(18).named("all");
  t.add("ReduceSum", {X(F32, {2, 0, 5}), K64({1})}, Tol::Accum).set(18).named("empty_axis");
  t.add("ReduceMax", {X(F32, {0, 5}), K64({1})}, Tol::Accum).set(18).named("empty_rows");
  t.add("ReduceSum", {X(F32, {3, 1, 1023}), Fed64({0, -1})}, Tol::Accum).set(18).named("fed_axes");
  t.add("ReduceSum", {X(F32, {3, 7}), None()}, Tol::Accum)
      .set(18)
      .a(attr_int("noop_with_empty_axes", 1))
      .named("noop");
  t.add("ReduceMean", {X(F32, {2, 3, 4})}, Tol::Accum)
      .set(13)
      .a(attr_ints("axes", {1}))
      .named("opset13");
  t.add("ReduceMax", {Int(I32, {7, 1023}, -1000, 1000), K64({1})}, Tol::Exact).set(18);
  t.add("ReduceMin", {Int(I64, {7, 1023}, -1000, 1000), K64({0})}, Tol::Exact).set(18);
  t.add("ReduceSum", {Int(I64, {7, 1023}, -1000, 1000), K64({1})}, Tol::Exact).set(18);
  // ArgMax / ArgMin: ties (small integers) decide select_last_index.
  for (const char* op : {"ArgMax", "ArgMin"}) {
    t.add(op, {X(F32, {7, 4097})}, Tol::Exact).a(attr_int("axis", 1));
    t.add(op, {X(F32, {1023, 7})}, Tol::Exact).a(attr_int("axis", 0)).a(attr_int("keepdims", 0));
    t.add(op, {X(F16, {4, 1023})}, Tol::Exact)
        .a(attr_int("axis", -1))
        .a(attr_int("select_last_index", 1));
    t.add(op, {X(BF16, {3, 5, 7})}, Tol::Exact).a(attr_int("axis", 1));
    for (int64_t last : {0, 1})
      t.add(op, {Int(I32, {7, 33}, 0, 3)}, Tol::Exact)
          .a(attr_int("axis", 1))
          .a(attr_int("select_last_index", last))
          .named(last ? "ties_last" : "ties_first");
  }
}

void softmax_norm_rows(Table& t) {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    t.add(op, {X(F32, {7, 4097})}, Tol::Accum).set(13);
    t.add(op, {X(F32, {3, 5, 7})}, Tol::Accum).set(13).a(attr_int("axis", 1)).named("axis1");
    t.add(op, {X(F32, {1, 1})}, Tol::Accum).set(13);
    t.add(op, {X(F32, {7, 1023}, 30)}, Tol::Accum).set(13).named("large");
    t.add(op, {X(F16, {4, 1023}, 3)}, Tol::Accum).set(13);
    t.add(op, {X(BF16, {2, 3, 33}, 3)}, Tol::Accum).set(13);
    t.add(op, {X(F32, {0, 7})}, Tol::Accum).set(13).named("empty");
    // Opset 11: the input is coerced to 2-D at `axis`, the softmax spans every later axis.
    t.add(op, {X(F32, {2, 3, 4})}, Tol::Accum).set(11).a(attr_int("axis", 1)).named("opset11");
  }
  // LayerNormalization (17): last axis, optional bias, an inner block of two axes, Mean and
  // InvStdDev outputs, a large mean (variance by subtraction must not cancel).
  t.add("LayerNormalization", {X(F32, {2, 7, 768}), Const(X(F32, {768})), Const(X(F32, {768}))},
        Tol::Accum)
      .set(17)
      .a(attr_float("epsilon", 1e-5));
  t.add("LayerNormalization", {X(F32, {3, 1023}), X(F32, {1023})}, Tol::Accum)
      .set(17)
      .outs(3)
      .named("stats");
  t.add("LayerNormalization", {X(F32, {2, 3, 5}), X(F32, {3, 5}), X(F32, {3, 5})}, Tol::Accum)
      .set(17)
      .a(attr_int("axis", 1));
  t.add("LayerNormalization", {Xm(F32, {4, 4097}, 10, 1), X(F32, {4097}), X(F32, {4097})},
        Tol::Accum)
      .set(17)
      .named("offset");
  for (DataType dt : {F16, BF16})
    t.add("LayerNormalization", {X(dt, {4, 768}, 2), Const(X(dt, {768})), Const(X(dt, {768}))},
          Tol::Accum)
        .set(17);
  t.add("LayerNormalization", {X(F32, {0, 768}), X(F32, {768}), X(F32, {768})}, Tol::Accum)
      .set(17)
      .named("empty");
  // RMSNormalization (23).
  t.add("RMSNormalization", {X(F32, {2, 7, 768}), Const(X(F32, {768}))}, Tol::Accum).set(23);
  t.add("RMSNormalization", {X(F32, {2, 3, 5}), X(F32, {3, 5})}, Tol::Accum)
      .set(23)
      .a(attr_int("axis", 1));
  t.add("RMSNormalization", {X(F16, {3, 1023}), X(F16, {1023})}, Tol::Accum).set(23);
  t.add("RMSNormalization", {X(BF16, {4097}), X(BF16, {4097})}, Tol::Accum)
      .set(23)
      .a(attr_float("epsilon", 1e-3));
  // com.microsoft SkipLayerNormalization: the CPU has none, so its reference is
  // LayerNormalization(input + skip [+ bias], gamma, beta).
  auto skip_ref = [](bool has_beta, bool has_bias, double eps) -> RefGraph {
    return [=](ModelBuilder& b, const std::vector<std::string>& ins,
               const std::vector<std::string>& outs) {
      b.node("Add", {ins[0], ins[1]}, {"ref_sum"});
      std::string sum = "ref_sum";
      if (has_bias) {
        b.node("Add", {sum, ins[4]}, {"ref_sum_bias"});
        sum = "ref_sum_bias";
      }
      Node& ln = b.node("LayerNormalization", {sum, ins[2], has_beta ? ins[3] : ""}, {outs[0]});
      test::set_attrs(ln, {attr_int("axis", -1), attr_float("epsilon", eps)});
    };
  };
  for (DataType dt : {F32, F16}) {
    t.add("SkipLayerNormalization",
          {X(dt, {2, 7, 768}), X(dt, {2, 7, 768}), Const(X(dt, {768})), Const(X(dt, {768})),
           Const(X(dt, {768}))},
          Tol::Accum)
        .set(17)
        .ms()
        .a(attr_float("epsilon", 1e-5))
        .ref(skip_ref(true, true, 1e-5))
        .named("beta_bias");
    t.add("SkipLayerNormalization",
          {X(dt, {3, 5, 1023}), X(dt, {3, 5, 1023}), Const(X(dt, {1023}))}, Tol::Accum)
        .set(17)
        .ms()
        .a(attr_float("epsilon", 1e-6))
        .ref(skip_ref(false, false, 1e-6));
  }
  // BatchNormalization (15, inference): 4-D, 2-D, 3-D; statistics as constants.
  auto bn = [&](DataType dt, Shape x, int64_t c) -> Row& {
    return t
        .add("BatchNormalization",
             {X(dt, std::move(x)), Const(X(dt, {c})), Const(X(dt, {c})), Const(X(dt, {c}, 0.5)),
              Const(U(dt, {c}, 0.5, 2))},
             Tol::Accum)
        .set(15)
        .a(attr_float("epsilon", 1e-3));
  };
  bn(F32, {2, 3, 7, 7}, 3);
  bn(F32, {4, 5}, 5);
  bn(F32, {2, 16, 33}, 16);
  bn(F16, {2, 8, 9, 9}, 8);
  bn(BF16, {2, 8, 9, 9}, 8);
}

void data_movement_rows(Table& t) {
  // Gather (negative indices are valid), GatherElements, ScatterND.
  t.add("Gather", {X(F32, {7, 1023}), Int(I64, {5}, -7, 6)}, Tol::Exact).a(attr_int("axis", 0));
  t.add("Gather", {X(F32, {7, 1023}), Int(I32, {2, 3}, -1023, 1022)}, Tol::Exact)
      .a(attr_int("axis", 1));
  t.add("Gather", {Int(I64, {9, 4}, -1000, 1000), Int(I64, {3, 2}, 0, 8)}, Tol::Exact);
  t.add("Gather", {X(F16, {4097}), Int(I64, {}, -4097, 4096)}, Tol::Exact).named("scalar_index");
  t.add("Gather", {X(F32, {7, 33}), Int(I64, {0}, 0, 6)}, Tol::Exact).named("empty");
  t.add("Gather", {Const(X(BF16, {50, 64})), Int(I64, {2, 7}, 0, 49)}, Tol::Exact)
      .named("embedding");
  t.add("Gather", {X(F32, {2, 3, 4097}), Int(I64, {5}, -3, 2)}, Tol::Exact).a(attr_int("axis", 1));
  t.add("GatherElements", {X(F32, {7, 33}), Int(I64, {7, 5}, -33, 32)}, Tol::Exact)
      .a(attr_int("axis", 1));
  t.add("GatherElements", {X(F32, {7, 33}), Int(I64, {3, 33}, -7, 6)}, Tol::Exact)
      .a(attr_int("axis", 0));
  t.add("GatherElements", {X(F16, {4, 5, 6}), Int(I32, {4, 5, 2}, 0, 5)}, Tol::Exact)
      .a(attr_int("axis", 2));
  t.add("GatherElements", {Int(I64, {4, 1023}, -9, 9), Int(I64, {4, 1023}, 0, 1022)}, Tol::Exact)
      .a(attr_int("axis", 1));
  t.add("ScatterND", {X(F32, {7, 33}), Ki(I64, {3, 1}, {4, 0, 6}), X(F32, {3, 33})}, Tol::Exact)
      .set(18);
  t.add("ScatterND", {X(F32, {4, 5, 6}), Ki(I64, {2, 2}, {1, 2, 3, 0}), X(F32, {2, 6})}, Tol::Exact)
      .set(18);
  t.add("ScatterND", {X(F16, {1023}), Ki(I64, {4, 1}, {7, 1000, 0, 5}), X(F16, {4})}, Tol::Exact)
      .set(18);
  t.add("ScatterND", {Int(I64, {5, 3}, -9, 9), Ki(I64, {2, 2}, {0, 1, 4, 2}), Int(I64, {2}, -9, 9)},
        Tol::Exact)
      .set(18);
  // reduction="add" with repeated indices: order-free up to rounding.
  t.add("ScatterND", {X(F32, {7, 33}), Ki(I64, {4, 1}, {1, 1, 5, 1}), X(F32, {4, 33})}, Tol::Accum)
      .set(18)
      .a(attr_string("reduction", "add"))
      .named("add");
  t.add("ScatterND", {X(F32, {7, 33}), Ki(I64, {2, 1}, {2, 3}), X(F32, {2, 33})}, Tol::Accum)
      .set(18)
      .a(attr_string("reduction", "mul"))
      .named("mul");

  // Transpose.
  t.add("Transpose", {X(F32, {2, 3, 4, 5})}, Tol::Exact).a(attr_ints("perm", {3, 1, 0, 2}));
  t.add("Transpose", {X(F32, {7, 4097})}, Tol::Exact).a(attr_ints("perm", {1, 0}));
  t.add("Transpose", {X(F32, {33, 1, 65})}, Tol::Exact).a(attr_ints("perm", {2, 0, 1}));
  t.add("Transpose", {X(F16, {2, 3, 4, 5})}, Tol::Exact).a(attr_ints("perm", {0, 2, 3, 1}));
  t.add("Transpose", {X(BF16, {33, 65})}, Tol::Exact).a(attr_ints("perm", {1, 0}));
  t.add("Transpose", {Int(I64, {3, 5, 7}, -9, 9)}, Tol::Exact).a(attr_ints("perm", {2, 0, 1}));
  t.add("Transpose", {Bool({4, 6})}, Tol::Exact).a(attr_ints("perm", {1, 0}));
  t.add("Transpose", {Int(U8, {2, 3, 4, 5}, 0, 255)}, Tol::Exact)
      .a(attr_ints("perm", {0, 2, 3, 1}));
  t.add("Transpose", {X(F32, {2, 3, 2, 3, 2, 3})}, Tol::Exact)
      .a(attr_ints("perm", {5, 4, 3, 2, 1, 0}));
  t.add("Transpose", {X(F32, {0, 3})}, Tol::Exact).a(attr_ints("perm", {1, 0})).named("empty");
  t.add("Transpose", {X(F32, {2, 3, 4})}, Tol::Exact).named("default_perm");
  t.add("Transpose", {X(F32, {2, 12, 128, 64})}, Tol::Exact)
      .a(attr_ints("perm", {0, 2, 1, 3}))
      .named("heads");

  // Concat / Split.
  t.add("Concat", {X(F32, {2, 3, 5}), X(F32, {2, 1, 5}), X(F32, {2, 7, 5})}, Tol::Exact)
      .set(13)
      .a(attr_int("axis", 1));
  t.add("Concat", {X(F32, {4, 7}), X(F32, {4, 1}), X(F32, {4, 1023})}, Tol::Exact)
      .set(13)
      .a(attr_int("axis", -1));
  t.add("Concat", {X(F32, {2, 3, 5}), X(F32, {2, 0, 5}), X(F32, {2, 4, 5})}, Tol::Exact)
      .set(13)
      .a(attr_int("axis", 1))
      .named("empty_part");
  t.add("Concat", {Int(I64, {3}, -9, 9), Int(I64, {1}, -9, 9), Int(I64, {7}, -9, 9)}, Tol::Exact)
      .set(13)
      .a(attr_int("axis", 0));
  t.add("Concat", {X(F16, {2, 33}), X(F16, {5, 33})}, Tol::Exact).set(13).a(attr_int("axis", 0));
  t.add("Concat", {X(BF16, {2, 3}), X(BF16, {2, 4097})}, Tol::Exact).set(13).a(attr_int("axis", 1));
  t.add("Concat", {Bool({3, 2}), Bool({3, 5})}, Tol::Exact).set(13).a(attr_int("axis", 1));
  t.add("Split", {X(F32, {7, 33}), K64({10, 23})}, Tol::Exact)
      .set(18)
      .a(attr_int("axis", 1))
      .outs(2);
  t.add("Split", {X(F32, {7, 33})}, Tol::Exact)
      .set(18)
      .a(attr_int("axis", 1))
      .a(attr_int("num_outputs", 3))
      .outs(3);
  t.add("Split", {X(F32, {7, 33})}, Tol::Exact)
      .set(18)
      .a(attr_int("axis", 0))
      .a(attr_int("num_outputs", 4))
      .outs(4)
      .named("uneven");
  t.add("Split", {X(F16, {4, 1023}), K64({1, 1022})}, Tol::Exact)
      .set(18)
      .a(attr_int("axis", -1))
      .outs(2);
  t.add("Split", {Int(I64, {6}, -9, 9), Fed64({2, 0, 4})}, Tol::Exact)
      .set(18)
      .outs(3)
      .named("fed_zero_part");
  t.add("Split", {X(F32, {2, 7, 2304}), K64({768, 768, 768})}, Tol::Exact)
      .set(18)
      .a(attr_int("axis", -1))
      .outs(3)
      .named("qkv");

  // Slice (starts, ends, axes, steps): steps, negative steps, clamping, empty, fed at run time.
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max(),
                    kMin = std::numeric_limits<int64_t>::min();
  t.add("Slice", {X(F32, {7, 1023}), K64({1, -100}), K64({5, kMax}), K64({0, 1}), K64({2, 3})},
        Tol::Exact)
      .set(13);
  t.add("Slice", {X(F32, {7, 33}), K64({-1}), K64({kMin}), K64({1}), K64({-2})}, Tol::Exact)
      .set(13)
      .named("neg_step");
  t.add("Slice", {X(F32, {5, 6}), K64({1, 2}), K64({4, 5})}, Tol::Exact).set(13).named("no_axes");
  t.add("Slice", {X(F16, {4, 4097}), Fed64({0, 17}), Fed64({3, 4000}), Fed64({0, 1})}, Tol::Exact)
      .set(13)
      .named("fed");
  t.add("Slice", {Int(I64, {10}, -9, 9), K64({2}), K64({8})}, Tol::Exact).set(13);
  t.add("Slice", {X(F32, {7, 9}), K64({-1000}), K64({1000}), K64({1})}, Tol::Exact)
      .set(13)
      .named("clamped");
  t.add("Slice", {X(F32, {7, 9}), K64({3}), K64({3}), K64({0})}, Tol::Exact).set(13).named("empty");
  t.add("Slice", {X(BF16, {2, 3, 128}), K64({64}), K64({128}), K64({-1})}, Tol::Exact).set(13);

  // Pad (opset 21: pads, constant_value, axes inputs; modes constant, reflect, edge, wrap).
  t.add("Pad", {X(F32, {2, 3, 7, 7}), K64({0, 0, 1, 2, 0, 0, 3, 0}), Kv(F32, {}, {1.5})},
        Tol::Exact);
  t.add("Pad", {X(F32, {1, 3, 33}), K64({0, 0, 2, 0, 0, 5})}, Tol::Exact)
      .a(attr_string("mode", "reflect"))
      .named("reflect");
  t.add("Pad", {X(F32, {2, 5, 5}), K64({0, 1, 1, 0, 2, 2})}, Tol::Exact)
      .a(attr_string("mode", "edge"))
      .named("edge");
  t.add("Pad", {X(F32, {3, 5}), K64({1, 2, 1, 2})}, Tol::Exact)
      .a(attr_string("mode", "wrap"))
      .named("wrap");
  t.add("Pad", {X(F32, {3, 8}), K64({0, -2, 1, -1}), Kv(F32, {}, {-3})}, Tol::Exact).named("crop");
  t.add("Pad", {X(F32, {2, 3, 7, 7}), K64({1, 1, 1, 1}), None(), K64({2, 3})}, Tol::Exact)
      .named("axes");
  t.add("Pad", {X(F16, {4, 1023}), Fed64({0, 1, 0, 1}), Kv(F16, {}, {0.5})}, Tol::Exact)
      .named("fed_pads");
  t.add("Pad", {Int(I64, {3, 4}, -9, 9), K64({1, 0, 0, 2}), Ki(I64, {}, {7})}, Tol::Exact);
  t.add("Pad", {X(F32, {0, 3}), K64({1, 0, 1, 0}), Kv(F32, {}, {2})}, Tol::Exact)
      .named("from_empty");

  // Expand / Tile.
  t.add("Expand", {X(F32, {3, 1}), K64({2, 3, 1023})}, Tol::Exact).set(13);
  t.add("Expand", {X(F32, {1}), K64({7, 1})}, Tol::Exact).set(13);
  t.add("Expand", {Int(I64, {1, 5}, -9, 9), K64({4, 5})}, Tol::Exact).set(13);
  t.add("Expand", {X(F16, {2, 1, 3}), Fed64({2, 4, 3})}, Tol::Exact).set(13).named("fed");
  t.add("Expand", {Bool({1, 3}), K64({2, 1})}, Tol::Exact).set(13);
  t.add("Expand", {X(F32, {1, 1, 128, 128}), K64({2, 12, 1, 1})}, Tol::Exact).set(13).named("mask");
  t.add("Tile", {X(F32, {2, 3}), K64({3, 1})}, Tol::Exact).set(13);
  t.add("Tile", {X(F32, {1, 7, 1}), K64({2, 1, 1023})}, Tol::Exact).set(13);
  t.add("Tile", {Int(I64, {4}, -9, 9), K64({3})}, Tol::Exact).set(13);
  t.add("Tile", {X(F16, {2, 1, 3}), Fed64({1, 5, 2})}, Tol::Exact).set(13).named("fed");

  // Reshape / Squeeze / Unsqueeze / Flatten (views on the device).
  t.add("Reshape", {X(F32, {2, 3, 4}), K64({0, -1})}, Tol::Exact).set(14);
  t.add("Reshape", {X(F32, {6, 4}), K64({3, -1, 2})}, Tol::Exact).set(14);
  t.add("Reshape", {Int(I64, {12}, -9, 9), K64({3, 4})}, Tol::Exact).set(14);
  t.add("Reshape", {X(F16, {2, 3, 4}), Fed64({4, 6})}, Tol::Exact).set(14).named("fed");
  t.add("Reshape", {X(F32, {}), K64({1})}, Tol::Exact).set(14).named("scalar");
  t.add("Reshape", {X(F32, {0, 4}), K64({2, 0, 2})}, Tol::Exact)
      .set(14)
      .a(attr_int("allowzero", 1))
      .named("empty");
  t.add("Squeeze", {X(F32, {1, 7, 1}), K64({0, 2})}, Tol::Exact).set(13);
  t.add("Squeeze", {X(F32, {1, 7, 1})}, Tol::Exact).set(13).named("all");
  t.add("Squeeze", {Int(I64, {3, 1}, -9, 9), K64({-1})}, Tol::Exact).set(13);
  t.add("Squeeze", {X(F16, {1, 1, 5}), K64({1})}, Tol::Exact).set(13);
  t.add("Unsqueeze", {X(F32, {7, 3}), K64({0, -1})}, Tol::Exact).set(13);
  t.add("Unsqueeze", {X(F32, {}), K64({0})}, Tol::Exact).set(13).named("scalar");
  t.add("Unsqueeze", {Int(I64, {5}, -9, 9), K64({1})}, Tol::Exact).set(13);
  t.add("Flatten", {X(F32, {2, 3, 4, 5})}, Tol::Exact).set(13).a(attr_int("axis", 2));
  t.add("Flatten", {X(F32, {2, 3, 4, 5})}, Tol::Exact).set(13).a(attr_int("axis", 0));
  t.add("Flatten", {X(F16, {2, 3, 4})}, Tol::Exact).set(13).a(attr_int("axis", -1));
  t.add("Flatten", {Int(I64, {3, 4, 2}, -9, 9)}, Tol::Exact).set(13).a(attr_int("axis", 1));
}

void matrix_rows(Table& t) {
  const Tol M = Tol::Matrix;
  // MatMul: 2-D, batched, broadcast batch, 1-D either side, empty K and M, 1x1, large K.
  t.add("MatMul", {X(F32, {7, 1023}), X(F32, {1023, 33})}, M).set(13);
  t.add("MatMul", {X(F32, {3, 7, 64}), X(F32, {3, 64, 5})}, M).set(13).named("batched");
  t.add("MatMul", {X(F32, {2, 1, 7, 8}), X(F32, {3, 8, 9})}, M).set(13).named("bcast");
  t.add("MatMul", {X(F32, {64}), X(F32, {64, 5})}, M).set(13).named("vec_mat");
  t.add("MatMul", {X(F32, {7, 64}), X(F32, {64})}, M).set(13).named("mat_vec");
  t.add("MatMul", {X(F32, {2, 7, 64}), X(F32, {64})}, M).set(13).named("batch_vec");
  t.add("MatMul", {X(F32, {64}), X(F32, {64})}, M).set(13).named("dot");
  t.add("MatMul", {X(F32, {3, 0}), X(F32, {0, 4})}, M).set(13).named("empty_k");
  t.add("MatMul", {X(F32, {0, 8}), X(F32, {8, 4})}, M).set(13).named("empty_m");
  t.add("MatMul", {X(F32, {1, 1}), X(F32, {1, 1})}, M).set(13);
  t.add("MatMul", {X(F32, {257, 4097}), X(F32, {4097, 65})}, M).set(13).named("large_k");
  t.add("MatMul", {X(F32, {2, 128, 768}), Const(X(F32, {768, 3072}, 0.05))}, M)
      .set(13)
      .named("const_b");
  t.add("MatMul", {X(F16, {64, 128}), X(F16, {128, 256})}, M).set(13);
  t.add("MatMul", {X(F16, {4, 1, 33, 64}), X(F16, {1, 3, 64, 17})}, M).set(13).named("bcast");
  t.add("MatMul", {X(BF16, {2, 64, 128}), X(BF16, {128, 96})}, M).set(13);
  t.add("MatMul", {X(BF16, {1023}), X(BF16, {1023, 7})}, M).set(13).named("vec_mat");
  // Gemm: alpha/beta, transposes, C broadcast (vector, column, scalar) or absent, constant B.
  t.add("Gemm", {X(F32, {7, 33}), X(F32, {33, 5}), X(F32, {5})}, M)
      .set(13)
      .a(attr_float("alpha", 0.5))
      .a(attr_float("beta", 2));
  t.add("Gemm", {X(F32, {33, 7}), X(F32, {5, 33}), X(F32, {7, 1})}, M)
      .set(13)
      .a(attr_int("transA", 1))
      .a(attr_int("transB", 1))
      .named("trans");
  t.add("Gemm", {X(F32, {64, 128}), X(F32, {128, 256})}, M).set(13).named("no_c");
  t.add("Gemm", {X(F32, {1, 1023}), X(F32, {1023, 1}), X(F32, {})}, M).set(13).named("scalar_c");
  t.add("Gemm", {X(F32, {8, 768}), Const(X(F32, {3072, 768}, 0.05)), Const(X(F32, {3072}))}, M)
      .set(13)
      .a(attr_int("transB", 1))
      .named("linear");
  t.add("Gemm", {X(F16, {64, 128}), X(F16, {128, 32}), X(F16, {32})}, M).set(13);
  t.add("Gemm", {X(BF16, {64, 128}), X(BF16, {32, 128}), X(BF16, {32})}, M)
      .set(13)
      .a(attr_int("transB", 1));
  // com.microsoft FusedMatMul: alpha and transposes.
  t.add("FusedMatMul", {X(F32, {3, 64, 7}), X(F32, {3, 64, 9})}, M)
      .ms()
      .a(attr_float("alpha", 0.5))
      .a(attr_int("transA", 1));
  t.add("FusedMatMul", {X(F32, {2, 7, 64}), X(F32, {2, 9, 64})}, M).ms().a(attr_int("transB", 1));
  t.add("FusedMatMul", {X(F16, {7, 64}), X(F16, {9, 64})}, M)
      .ms()
      .a(attr_int("transB", 1))
      .a(attr_float("alpha", 0.125));
  t.add("FusedMatMul", {X(F32, {2, 12, 128, 64}), X(F32, {2, 12, 128, 64})}, M)
      .ms()
      .a(attr_int("transB", 1))
      .a(attr_float("alpha", 0.125))
      .named("scores");
}

void conv_pool_rows(Table& t) {
  const Tol M = Tol::Matrix;
  auto conv = [&](std::vector<In> ins) -> Row& { return t.add("Conv", std::move(ins), M).set(11); };
  conv({X(F32, {1, 3, 33, 33}), Const(X(F32, {8, 3, 3, 3})), Const(X(F32, {8}))})
      .a(attr_ints("pads", {1, 1, 1, 1}));
  conv({X(F32, {2, 8, 15, 15}), X(F32, {8, 2, 3, 3})})
      .a(attr_int("group", 4))
      .a(attr_ints("strides", {2, 2}))
      .named("groups_stride");
  conv({X(F32, {1, 16, 14, 14}), Const(X(F32, {16, 1, 3, 3})), Const(X(F32, {16}))})
      .a(attr_int("group", 16))
      .a(attr_ints("pads", {1, 1, 1, 1}))
      .named("depthwise");
  conv({X(F32, {1, 4, 17, 17}), X(F32, {6, 4, 3, 3})})
      .a(attr_ints("dilations", {2, 2}))
      .a(attr_ints("pads", {2, 2, 2, 2}))
      .named("dilated");
  conv({X(F32, {2, 4, 101}), X(F32, {6, 4, 5}), X(F32, {6})})
      .a(attr_ints("pads", {2, 2}))
      .a(attr_ints("strides", {2}))
      .named("1d");
  conv({X(F32, {1, 2, 9, 9, 9}), X(F32, {4, 2, 3, 3, 3}), X(F32, {4})})
      .a(attr_ints("pads", {1, 1, 1, 1, 1, 1}))
      .named("3d");
  conv({X(F32, {1, 3, 10, 11}), X(F32, {5, 3, 3, 2})})
      .a(attr_ints("pads", {0, 1, 2, 0}))
      .named("asym_pads");
  conv({X(F32, {1, 3, 15, 15}), X(F32, {4, 3, 4, 4})})
      .a(attr_string("auto_pad", "SAME_UPPER"))
      .a(attr_ints("strides", {2, 2}))
      .named("same_upper");
  conv({X(F32, {2, 64, 7, 7}), Const(X(F32, {32, 64, 1, 1}, 0.2)), Const(X(F32, {32}))})
      .named("1x1");
  conv({X(F32, {1, 64, 56, 56}), Const(X(F32, {64, 64, 3, 3}, 0.05))})
      .a(attr_ints("pads", {1, 1, 1, 1}))
      .named("resnet");
  conv({X(F32, {0, 3, 8, 8}), X(F32, {4, 3, 3, 3})}).named("empty_batch");
  conv({X(F16, {1, 8, 17, 17}), Const(X(F16, {16, 8, 3, 3}, 0.3)), Const(X(F16, {16}))})
      .a(attr_ints("pads", {1, 1, 1, 1}));
  conv({X(BF16, {1, 8, 17, 17}), X(BF16, {16, 8, 3, 3}, 0.3)}).a(attr_ints("pads", {1, 1, 1, 1}));
  // ConvTranspose: W is [C_in, C_out / group, k...].
  auto convt = [&](std::vector<In> ins) -> Row& {
    return t.add("ConvTranspose", std::move(ins), M).set(11);
  };
  convt({X(F32, {1, 4, 7, 7}), X(F32, {4, 6, 3, 3}), X(F32, {6})})
      .a(attr_ints("strides", {2, 2}))
      .a(attr_ints("pads", {1, 1, 1, 1}))
      .a(attr_ints("output_padding", {1, 1}));
  convt({X(F32, {1, 4, 5, 5}), X(F32, {4, 3, 3, 3})}).a(attr_int("group", 2)).named("groups");
  convt({X(F32, {1, 3, 11}), X(F32, {3, 2, 4})}).a(attr_ints("strides", {3})).named("1d");
  convt({X(F32, {1, 2, 6, 6}), X(F32, {2, 3, 3, 3})})
      .a(attr_ints("dilations", {2, 2}))
      .named("dilated");
  convt({X(F16, {1, 8, 9, 9}), X(F16, {8, 4, 2, 2}, 0.3)}).a(attr_ints("strides", {2, 2}));
  // com.microsoft FusedConv: Conv + B (+ Z, the residual) then the activation.
  auto fconv = [&](std::vector<In> ins, const char* act) -> Row& {
    return t.add("FusedConv", std::move(ins), M).ms().a(attr_string("activation", act));
  };
  fconv({X(F32, {1, 3, 15, 15}), Const(X(F32, {8, 3, 3, 3})), Const(X(F32, {8}))}, "Relu")
      .a(attr_ints("pads", {1, 1, 1, 1}));
  fconv({X(F32, {1, 8, 9, 9}), Const(X(F32, {8, 8, 3, 3}, 0.3)), Const(X(F32, {8})),
         X(F32, {1, 8, 9, 9})},
        "Relu")
      .a(attr_ints("pads", {1, 1, 1, 1}))
      .named("sum");
  fconv({X(F32, {1, 4, 9, 9}), X(F32, {4, 4, 1, 1}), X(F32, {4})}, "LeakyRelu")
      .a(attr_floats("activation_params", {0.2f}))
      .named("leaky");
  fconv({X(F32, {2, 4, 9, 9}), X(F32, {6, 4, 3, 3}), X(F32, {6})}, "Sigmoid").named("sigmoid");
  fconv({X(F16, {1, 8, 9, 9}), Const(X(F16, {8, 8, 3, 3}, 0.3)), Const(X(F16, {8}))}, "Relu")
      .a(attr_ints("pads", {1, 1, 1, 1}));

  // Pools.
  auto pool = [&](const char* op, In x, Tol tol) -> Row& {
    return t.add(op, {std::move(x)}, tol).set(19);
  };
  for (const auto& [op, tol] : std::initializer_list<std::pair<const char*, Tol>>{
           {"MaxPool", Tol::Exact}, {"AveragePool", Tol::Accum}}) {
    pool(op, X(F32, {1, 3, 33, 33}), tol)
        .a(attr_ints("kernel_shape", {3, 3}))
        .a(attr_ints("strides", {2, 2}))
        .a(attr_ints("pads", {1, 1, 1, 1}));
    pool(op, X(F32, {1, 2, 10, 10}), tol)
        .a(attr_ints("kernel_shape", {3, 3}))
        .a(attr_ints("strides", {2, 2}))
        .a(attr_int("ceil_mode", 1))
        .named("ceil");
    pool(op, X(F32, {2, 3, 101}), tol)
        .a(attr_ints("kernel_shape", {4}))
        .a(attr_ints("strides", {3}))
        .named("1d");
    pool(op, X(F32, {1, 2, 7, 7, 7}), tol)
        .a(attr_ints("kernel_shape", {2, 2, 2}))
        .a(attr_ints("strides", {2, 2, 2}))
        .named("3d");
    pool(op, X(F16, {2, 8, 15, 15}), tol)
        .a(attr_ints("kernel_shape", {3, 3}))
        .a(attr_ints("pads", {1, 1, 1, 1}));
    pool(op, X(BF16, {2, 8, 15, 15}), tol)
        .a(attr_ints("kernel_shape", {2, 2}))
        .a(attr_ints("strides", {2, 2}));
  }
  pool("MaxPool", X(F32, {1, 2, 9, 9}), Tol::Exact)
      .a(attr_ints("kernel_shape", {2, 2}))
      .a(attr_ints("dilations", {2, 2}))
      .named("dilated");
  pool("MaxPool", X(F32, {1, 64, 112, 112}), Tol::Exact)
      .a(attr_ints("kernel_shape", {3, 3}))
      .a(attr_ints("strides", {2, 2}))
      .a(attr_ints("pads", {1, 1, 1, 1}))
      .named("resnet");
  for (int64_t include : {0, 1})
    pool("AveragePool", X(F32, {1, 3, 32, 32}), Tol::Accum)
        .a(attr_ints("kernel_shape", {3, 3}))
        .a(attr_ints("strides", {2, 2}))
        .a(attr_ints("pads", {1, 1, 1, 1}))
        .a(attr_int("count_include_pad", include))
        .named(include ? "count_pad" : "skip_pad");
  for (DataType dt : {F32, F16, BF16})
    t.add("GlobalAveragePool", {X(dt, {2, 64, 7, 7})}, Tol::Accum);
  t.add("GlobalAveragePool", {X(F32, {1, 3, 1023})}, Tol::Accum).named("1d");
  t.add("GlobalAveragePool", {X(F32, {1, 4, 3, 3, 3})}, Tol::Accum).named("3d");
  t.add("GlobalAveragePool", {X(F32, {1, 2048, 7, 7})}, Tol::Accum).named("resnet");
  t.add("GlobalMaxPool", {X(F32, {2, 64, 7, 7})}, Tol::Exact);
}

void attention_rows(Table& t) {
  const Tol M = Tol::Matrix;
  auto att = [&](std::vector<In> ins) -> Row& {
    return t.add("Attention", std::move(ins), M).set(23);
  };
  att({X(F32, {2, 4, 7, 16}), X(F32, {2, 4, 9, 16}), X(F32, {2, 4, 9, 16})});
  att({X(F32, {1, 2, 33, 32}), X(F32, {1, 2, 33, 32}), X(F32, {1, 2, 33, 32})})
      .a(attr_int("is_causal", 1))
      .named("causal");
  att({X(F32, {2, 4, 7, 16}), X(F32, {2, 4, 9, 16}), X(F32, {2, 4, 9, 16})})
      .a(attr_int("is_causal", 1))
      .named("causal_rect");
  att({X(F32, {2, 4, 7, 16}), X(F32, {2, 4, 9, 16}), X(F32, {2, 4, 9, 16}), Mask({2, 1, 7, 9})})
      .named("bool_mask");
  att({X(F32, {2, 4, 7, 16}), X(F32, {2, 4, 9, 16}), X(F32, {2, 4, 9, 16}), X(F32, {7, 9}, 2)})
      .named("float_mask");
  att({X(F32, {2, 8, 7, 16}), X(F32, {2, 2, 9, 16}), X(F32, {2, 2, 9, 16})}).named("gqa");
  att({X(F32, {2, 7, 64}), X(F32, {2, 9, 64}), X(F32, {2, 9, 64})})
      .a(attr_int("q_num_heads", 4))
      .a(attr_int("kv_num_heads", 4))
      .named("3d");
  att({X(F32, {2, 4, 7, 16}), X(F32, {2, 4, 9, 16}), X(F32, {2, 4, 9, 8})}).named("dv8");
  att({X(F32, {2, 4, 7, 16}), X(F32, {2, 4, 9, 16}), X(F32, {2, 4, 9, 16})})
      .a(attr_float("scale", 0.3))
      .named("scale");
  att({X(F32, {1, 2, 3, 16}), X(F32, {1, 2, 3, 16}), X(F32, {1, 2, 3, 16}), None(),
       X(F32, {1, 2, 5, 16}), X(F32, {1, 2, 5, 16})})
      .a(attr_int("is_causal", 1))
      .outs(3)
      .named("past_kv");
  att({X(F32, {1, 12, 128, 64}), X(F32, {1, 12, 128, 64}), X(F32, {1, 12, 128, 64})})
      .a(attr_int("is_causal", 1))
      .named("gpt2");
  att({X(F16, {2, 4, 33, 64}), X(F16, {2, 4, 33, 64}), X(F16, {2, 4, 33, 64})})
      .a(attr_int("is_causal", 1))
      .named("causal");
  att({X(F16, {2, 4, 7, 64}), X(F16, {2, 4, 9, 64}), X(F16, {2, 4, 9, 64}), Mask({2, 4, 7, 9})})
      .named("bool_mask");
  att({X(BF16, {1, 4, 17, 64}), X(BF16, {1, 4, 17, 64}), X(BF16, {1, 4, 17, 64}), Mask({17, 17})})
      .named("bool_mask");
}

std::vector<Row> all_rows() {
  Table t;
  elementwise_rows(t);
  cast_rows(t);
  reduction_rows(t);
  softmax_norm_rows(t);
  data_movement_rows(t);
  matrix_rows(t);
  conv_pool_rows(t);
  attention_rows(t);
  std::vector<Row> rows = t.take();
  for (Row& r : rows) {
    int i = 0;
    for (In& in : r.ins) {
      if (!omitted(in)) in.name = fmt::format("x{}", i);
      ++i;
    }
  }
  return rows;
}

// ---------------------------------------------------------------------------------------------
// Models, inputs, comparison.

/// Values of `in`, drawn from `seed`.
Tensor make_tensor(const In& in, uint32_t seed) {
  std::mt19937 rng(seed);
  Tensor t = Tensor::empty(in.dt, in.shape);
  const int64_t n = t.numel();
  const int64_t last = in.shape.empty() ? 1 : std::max<int64_t>(in.shape.back(), 1);
  auto real = [&](int64_t i) -> double {
    switch (in.gen) {
      case Gen::Normal:
        return std::normal_distribution<double>(in.a, in.b)(rng);
      case Gen::Uniform:
        return std::uniform_real_distribution<double>(in.a, in.b)(rng);
      case Gen::Away: {
        double m = std::uniform_real_distribution<double>(0.5, 2.0)(rng);
        return (rng() & 1) ? m : -m;
      }
      case Gen::Int:
        return double(std::uniform_int_distribution<int64_t>(int64_t(in.a), int64_t(in.b))(rng));
      case Gen::Bool:
        return std::bernoulli_distribution(in.a)(rng) ? 1 : 0;
      case Gen::MaskRows:
        return (i % last == 0 || std::bernoulli_distribution(0.7)(rng)) ? 1 : 0;
      case Gen::Values:
        return in.values.empty() ? double(in.ints.at(size_t(i))) : in.values.at(size_t(i));
      case Gen::Bytes:
        return 0;
    }
    return 0;
  };
  if (in.gen == Gen::Values) {
    EXPECT_EQ(size_t(n), in.values.empty() ? in.ints.size() : in.values.size())
        << "constant of shape " << shape_str(in.shape);
    if (size_t(n) != (in.values.empty() ? in.ints.size() : in.values.size())) return t;
  }
  auto fill = [&]<typename T>() {
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) {
      if constexpr (std::is_same_v<T, int64_t>) {
        // int64 constants keep their exact value (INT64_MIN/MAX in Slice's ends).
        p[i] = in.gen == Gen::Values && !in.ints.empty() ? in.ints[size_t(i)] : int64_t(real(i));
      } else if constexpr (std::is_same_v<T, float16> || std::is_same_v<T, bfloat16>) {
        p[i] = T(static_cast<float>(real(i)));
      } else {
        p[i] = static_cast<T>(real(i));
      }
    }
  };
  switch (in.dt) {
    case F32:
      fill.operator()<float>();
      break;
    case F64:
      fill.operator()<double>();
      break;
    case F16:
      fill.operator()<float16>();
      break;
    case BF16:
      fill.operator()<bfloat16>();
      break;
    case I8:
      fill.operator()<int8_t>();
      break;
    case U8:
      fill.operator()<uint8_t>();
      break;
    case I32:
      fill.operator()<int32_t>();
      break;
    case I64:
      fill.operator()<int64_t>();
      break;
    case BOOL:
      fill.operator()<bool>();
      break;
    case E4M3:
    case E5M2:
      for (int64_t i = 0; i < n; ++i) t.data_as<uint8_t>()[i] = static_cast<uint8_t>(rng() & 0xff);
      break;
    default:
      ADD_FAILURE() << "no generator for " << dtype_name(in.dt);
  }
  return t;
}

std::vector<std::string> output_names(const Row& r) {
  std::vector<std::string> outs;
  for (int i = 0; i < r.outputs; ++i) outs.push_back(fmt::format("y{}", i));
  return outs;
}

/// The row's single-node model, or (reference) the CPU graph standing in for it.
std::unique_ptr<Model> build_model(const Row& r, const NamedTensors& feeds,
                                   const NamedTensors& constants, bool reference) {
  ModelBuilder b(r.opset, r.domain);
  std::vector<std::string> ins;
  for (const In& in : r.ins) {
    ins.push_back(in.name);
    if (omitted(in)) continue;
    if (in.initializer)
      b.initializer(in.name, constants.at(in.name));
    else
      b.input(in.name, in.dt, feeds.at(in.name).shape());
  }
  // Trailing omitted inputs are left off rather than written as "".
  while (!ins.empty() && ins.back().empty()) ins.pop_back();
  std::vector<std::string> outs = output_names(r);
  if (reference && r.reference) {
    r.reference(b, ins, outs);
  } else {
    test::set_attrs(b.node(r.op, ins, outs, r.domain), r.attrs);
  }
  for (const auto& o : outs) b.output(o);
  return b.build();
}

bool is_copy(const NodePlacement& p) {
  return p.op_type == "MemcpyFromHost" || p.op_type == "MemcpyToHost";
}

std::string plan_str(const std::vector<NodePlacement>& plan) {
  std::string s;
  for (const auto& p : plan)
    s += fmt::format("\n    {:>5} {}{}{}", p.provider, p.domain.empty() ? "" : p.domain + ".",
                     p.node, p.fallback ? "  <- fallback" : "");
  return s;
}

/// Every node other than the copies runs on "cuda", and there is one.
void expect_on_cuda(const Session& s, const std::string& what) {
  auto plan = s.placement();
  int on_device = 0;
  for (const auto& p : plan) {
    if (is_copy(p)) continue;
    EXPECT_EQ(p.provider, "cuda") << what << ": " << p.node << " is not on the CUDA provider"
                                  << plan_str(plan);
    EXPECT_FALSE(p.fallback) << what << ": " << p.node << " fell back to the CPU" << plan_str(plan);
    on_device += p.provider == "cuda";
  }
  EXPECT_GT(on_device, 0) << what << ": no node ran on the CUDA provider" << plan_str(plan);
}

/// float8 NaN codes: E4M3FN has S.1111.111 only, E5M2 S.11111.xx with xx != 0.
bool is_float8_nan(DataType dt, uint8_t b) {
  if (dt == E4M3) return (b & 0x7f) == 0x7f;
  if (dt == E5M2) return (b & 0x7f) > 0x7c;
  return false;
}

/// got (CUDA) against want (CPU) under `tol`; the first mismatches are reported.
void expect_match(const std::string& what, const Tensor& got, const Tensor& want, Tol tol) {
  ASSERT_EQ(dtype_name(got.dtype()), dtype_name(want.dtype())) << what;
  ASSERT_EQ(shape_str(got.shape()), shape_str(want.shape())) << what;
  const int64_t n = want.numel();
  if (n == 0) return;
  const DataType dt = want.dtype();
  int bad = 0;
  std::ostringstream first;
  auto report = [&](int64_t i, const std::string& g, const std::string& w) {
    if (++bad <= 5) first << fmt::format("\n    [{}] cuda {} cpu {}", i, g, w);
  };
  if (!is_float(dt)) {
    // Integers, bool and float8: the bytes (a bool is any non-zero byte).
    const size_t width = dtype_size(dt);
    const auto* g = static_cast<const uint8_t*>(got.raw());
    const auto* w = static_cast<const uint8_t*>(want.raw());
    for (int64_t i = 0; i < n; ++i) {
      const uint8_t* gi = g + i * width;
      const uint8_t* wi = w + i * width;
      bool same = dt == BOOL ? (*gi != 0) == (*wi != 0) : std::memcmp(gi, wi, width) == 0;
      if (!same && is_float8_nan(dt, *gi) && is_float8_nan(dt, *wi)) same = true;  // any NaN code
      if (!same) {
        std::string gs, ws;
        for (size_t k = 0; k < width; ++k) {
          gs += fmt::format("{:02x}", gi[width - 1 - k]);
          ws += fmt::format("{:02x}", wi[width - 1 - k]);
        }
        report(i, "0x" + gs, "0x" + ws);
      }
    }
  } else {
    const std::vector<double> g = got.to_double_vector(), w = want.to_double_vector();
    double sum_sq = 0;
    int64_t finite = 0;
    for (double v : w)
      if (std::isfinite(v)) sum_sq += v * v, ++finite;
    const double rms = finite ? std::sqrt(sum_sq / double(finite)) : 0.0;
    // Elementwise maps of O(1) inputs: the absolute term only covers results near zero, so
    // its scale is capped at 1 (an exp's few huge values must not loosen every other value).
    const double S = std::max(tol == Tol::Elem ? std::min(rms, 1.0) : rms, 1e-30);
    const Bound bd = bound(tol, dt);
    double worst = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double gi = g[size_t(i)], wi = w[size_t(i)];
      bool ok;
      if (std::isnan(wi) || std::isnan(gi)) {
        ok = std::isnan(wi) && std::isnan(gi);
      } else if (std::isinf(wi) || std::isinf(gi)) {
        ok = gi == wi;
      } else if (tol == Tol::Exact) {
        ok = gi == wi;
      } else {
        const double err = std::abs(gi - wi), lim = bd.rtol * std::abs(wi) + bd.atol * S;
        ok = err <= lim;
        worst = std::max(worst, err / lim);
      }
      if (!ok) report(i, fmt::format("{:.9g}", gi), fmt::format("{:.9g}", wi));
    }
    if (bad)
      first << fmt::format("\n    rms(cpu) {:.4g}, rtol {}, atol {} x rms", S, bd.rtol, bd.atol);
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " elements differ (" << dtype_name(dt)
                    << " " << shape_str(want.shape()) << ")" << first.str();
}

// ---------------------------------------------------------------------------------------------
// The table's test.

/// ONYX_CUDA_TEST_CPU_REFERENCE=1 on a machine without a device: each row still builds and
/// runs its CPU reference (then skips), so a bad row is found before a GPU machine is lent
/// (scripts/gpu_check.sh prepare does this).
bool cpu_reference_check() {
  const char* v = std::getenv("ONYX_CUDA_TEST_CPU_REFERENCE");
  return v && std::string(v) == "1";
}

class CudaKernel : public ::testing::TestWithParam<Row> {
 protected:
  void SetUp() override {
    if (!have_device() && !cpu_reference_check()) GTEST_SKIP() << no_device_reason();
  }
};

TEST_P(CudaKernel, MatchesCpu) {
  const Row& r = GetParam();
  // Fixed seeds: a row's inputs depend only on its contents' order in the table.
  NamedTensors feeds, constants;
  uint32_t seed = 0x5eed;
  for (char c : r.op + r.tag) seed = seed * 31 + uint32_t(c);
  for (size_t i = 0; i < r.ins.size(); ++i) {
    const In& in = r.ins[i];
    if (omitted(in)) continue;
    seed = seed * 31 + uint32_t(in.dt) * 7 + uint32_t(in.shape.size());
    for (int64_t d : in.shape) seed = seed * 31 + uint32_t(d);
    Tensor v = make_tensor(in, seed + uint32_t(i));
    (in.initializer ? constants : feeds)[in.name] = v;
  }
  SessionOptions cuda_opts, cpu_opts;
  cuda_opts.providers = {"cuda", "cpu"};
  cuda_opts.intra_op_threads = cpu_opts.intra_op_threads = 2;
  cpu_opts.providers = {"cpu"};

  Session cpu(build_model(r, feeds, constants, true), cpu_opts);
  if (!have_device()) {  // cpu_reference_check()
    NamedTensors want = cpu.run(feeds);
    for (const auto& name : output_names(r)) EXPECT_TRUE(want.count(name)) << name;
    GTEST_SKIP() << "CPU reference ran; " << no_device_reason();
  }
  Session gpu(build_model(r, feeds, constants, false), cuda_opts);
  expect_on_cuda(gpu, r.op);
  for (const auto& p : cpu.placement()) EXPECT_EQ(p.provider, "cpu") << p.node;

  NamedTensors want = cpu.run(feeds), got = gpu.run(feeds);
  for (const auto& name : output_names(r)) {
    ASSERT_TRUE(got.count(name)) << name;
    EXPECT_EQ(got.at(name).device().type, DeviceType::CPU) << "Session::run returns host tensors";
    expect_match(r.op + " output " + name, got.at(name), want.at(name), r.tol);
  }
  // A second run on the same session (cached per-shape state, the arena's reused blocks).
  NamedTensors again = gpu.run(feeds);
  for (const auto& name : output_names(r))
    expect_match(r.op + " second run " + name, again.at(name), want.at(name), r.tol);
}

std::string row_name(const ::testing::TestParamInfo<Row>& info) {
  const Row& r = info.param;
  DataType dt = r.ins.empty() ? F32 : r.ins[0].dt;
  if (r.op == "Where" && r.ins.size() > 1) dt = r.ins[1].dt;
  std::string name = fmt::format("{:03d}_{}_{}", info.index, r.op, short_name(dt));
  if (!r.tag.empty()) name += "_" + r.tag;
  return sanitize(name);
}

INSTANTIATE_TEST_SUITE_P(Ops, CudaKernel, ::testing::ValuesIn(all_rows()), row_name);

// ---------------------------------------------------------------------------------------------
// Placement, copies, concurrency.

int count_op(const std::vector<NodePlacement>& plan, const std::string& op) {
  return int(std::count_if(plan.begin(), plan.end(),
                           [&](const NodePlacement& p) { return p.op_type == op; }));
}

int index_of(const std::vector<NodePlacement>& plan, const std::string& op) {
  for (size_t i = 0; i < plan.size(); ++i)
    if (plan[i].op_type == op) return int(i);
  return -1;
}

TEST(CudaPlacement, ADeviceChainHasOneCopyInAndOneOut) {
  SKIP_WITHOUT_DEVICE();
  ModelBuilder b(21);
  b.input("x", F32, Shape{7, 33});
  b.node("Relu", {"x"}, {"r"});
  b.node("Neg", {"r"}, {"n"});
  b.node("Sigmoid", {"n"}, {"y"});
  b.output("y");
  SessionOptions o;
  o.providers = {"cuda", "cpu"};
  Session s = b.session(o);
  auto plan = s.placement();
  EXPECT_EQ(count_op(plan, "MemcpyFromHost"), 1) << plan_str(plan);
  EXPECT_EQ(count_op(plan, "MemcpyToHost"), 1) << plan_str(plan);
  for (const auto& p : plan) {
    EXPECT_EQ(p.provider, "cuda") << p.node;
    if (is_copy(p)) {
      EXPECT_EQ(p.domain, "ai.onyx") << p.node;
    }
  }
  EXPECT_EQ(index_of(plan, "MemcpyFromHost"), 0) << plan_str(plan);
  EXPECT_EQ(index_of(plan, "MemcpyToHost"), int(plan.size()) - 1) << plan_str(plan);
}

TEST(CudaPlacement, CopyNodesWhereValuesCross) {
  SKIP_WITHOUT_DEVICE();
  // A CPU-only op between device ops: its output shape depends on the data.
  std::string cpu_op;
  for (const char* op : {"NonZero", "Unique"})
    if (!cuda_kernel_registry().find(op, "", 21, "cuda", F32)) {
      cpu_op = op;
      break;
    }
  if (cpu_op.empty())
    GTEST_SKIP() << "NonZero and Unique both have CUDA kernels; no CPU-only op to place";
  ASSERT_NE(cuda_kernel_registry().find("Cast", "", 21, "cuda", I64), nullptr)
      << "Cast from int64 on CUDA";

  // x -> Relu (cuda) -> r -> Neg (cuda) -> y1
  //                     r -> cpu_op (cpu) -> z -> Cast to float (cuda) -> y2
  ModelBuilder b(21);
  b.input("x", F32, Shape{7, 33});
  b.node("Relu", {"x"}, {"r"});
  b.node("Neg", {"r"}, {"y1"});
  b.node(cpu_op, {"r"}, {"z"});
  test::set_attrs(b.node("Cast", {"z"}, {"y2"}), {attr_int("to", int64_t(F32))});
  b.output("y1");
  b.output("y2");
  std::unique_ptr<Model> model = b.build();
  ModelBuilder rb(21);
  rb.input("x", F32, Shape{7, 33});
  rb.node("Relu", {"x"}, {"r"});
  rb.node("Neg", {"r"}, {"y1"});
  rb.node(cpu_op, {"r"}, {"z"});
  test::set_attrs(rb.node("Cast", {"z"}, {"y2"}), {attr_int("to", int64_t(F32))});
  rb.output("y1");
  rb.output("y2");

  SessionOptions o;
  o.providers = {"cuda", "cpu"};
  Session s(std::move(model), o);
  auto plan = s.placement();
  // Host -> device for x and z; device -> host for r (into the CPU op), y1 and y2.
  EXPECT_EQ(count_op(plan, "MemcpyFromHost"), 2) << plan_str(plan);
  EXPECT_EQ(count_op(plan, "MemcpyToHost"), 3) << plan_str(plan);
  for (const auto& p : plan) {
    if (p.op_type == cpu_op) {
      EXPECT_EQ(p.provider, "cpu") << plan_str(plan);
      EXPECT_TRUE(p.fallback) << "a node the CUDA provider has no kernel for is a fallback"
                              << plan_str(plan);
    } else {
      EXPECT_EQ(p.provider, "cuda") << p.node << plan_str(plan);
      EXPECT_FALSE(p.fallback) << p.node;
    }
  }
  // Execution order: a copy in before the first device op, a copy out before the CPU op, a
  // copy in between the CPU op and the Cast.
  const int relu = index_of(plan, "Relu"), cpu_at = index_of(plan, cpu_op),
            cast = index_of(plan, "Cast");
  ASSERT_GE(relu, 0);
  ASSERT_GE(cpu_at, 0);
  ASSERT_GE(cast, 0);
  auto copy_between = [&](const std::string& op, int from, int to) {
    for (int i = from + 1; i < to; ++i)
      if (plan[size_t(i)].op_type == op) return true;
    return false;
  };
  EXPECT_TRUE(copy_between("MemcpyFromHost", -1, relu)) << plan_str(plan);
  EXPECT_TRUE(copy_between("MemcpyToHost", relu, cpu_at)) << plan_str(plan);
  EXPECT_TRUE(copy_between("MemcpyFromHost", cpu_at, cast)) << plan_str(plan);

  // And the values are the CPU's.
  SessionOptions c;
  c.providers = {"cpu"};
  Session cpu = rb.session(c);
  for (const auto& p : cpu.placement())
    EXPECT_FALSE(is_copy(p)) << "a CPU-only session has no copies";
  NamedTensors feeds{{"x", test::random_normal({7, 33}, 7)}};
  NamedTensors got = s.run(feeds), want = cpu.run(feeds);
  for (const char* name : {"y1", "y2"}) expect_match(name, got.at(name), want.at(name), Tol::Exact);
}

TEST(CudaSession, ConcurrentRunsMatchTheCpu) {
  SKIP_WITHOUT_DEVICE();
  // y = Softmax(Relu(x W + b)) from 4 threads at once, 8 runs each on their own inputs: each
  // run has its own stream, and a kernel that used the default stream or shared scratch
  // between runs would mix them up.
  auto build = [] {
    ModelBuilder b(21);
    b.input("x", F32, SymShape{Dim::symbol("batch"), Dim::fixed(256)});
    b.initializer("W", test::random_normal({256, 256}, 11, 0.1f));
    b.initializer("bias", test::random_normal({256}, 12));
    b.node("MatMul", {"x", "W"}, {"h"});
    b.node("Add", {"h", "bias"}, {"a"});
    b.node("Relu", {"a"}, {"r"});
    test::set_attrs(b.node("Softmax", {"r"}, {"y"}), {attr_int("axis", -1)});
    b.output("y");
    return b;
  };
  SessionOptions g, c;
  g.providers = {"cuda", "cpu"};
  c.providers = {"cpu"};
  Session gpu = build().session(g), cpu = build().session(c);
  expect_on_cuda(gpu, "chain");
  constexpr int kThreads = 4, kRuns = 8;
  std::vector<Tensor> inputs, want;
  for (int i = 0; i < kThreads * kRuns; ++i) {
    inputs.push_back(test::random_normal({int64_t(1 + 7 * (i % 5)), 256}, 100 + uint32_t(i)));
    want.push_back(cpu.run({{"x", inputs.back()}}).at("y"));
  }
  std::vector<NamedTensors> got(inputs.size());
  std::atomic<int> errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (int k = 0; k < kRuns; ++k) {
        const size_t i = size_t(t * kRuns + k);
        try {
          got[i] = gpu.run({{"x", inputs[i]}});
        } catch (const std::exception&) {
          ++errors;
        }
      }
    });
  for (auto& th : threads) th.join();
  ASSERT_EQ(errors.load(), 0);
  for (size_t i = 0; i < inputs.size(); ++i)
    expect_match(fmt::format("run {}", i), got[i].at("y"), want[i], Tol::Matrix);
}

// ---------------------------------------------------------------------------------------------
// Runs everywhere (CUDA build or not, device or not): asking for the provider without a
// device is a clear error.

Session relu_session(const SessionOptions& o) {
  ModelBuilder b(21);
  b.input("x", F32, Shape{4});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  return b.session(o);
}

TEST(CudaProvider, NoDeviceIsAClearError) {
  std::cout << "built with CUDA: " << (built_with_cuda() ? "yes" : "no")
            << "; device: " << (have_device() ? "yes" : no_device_reason()) << "\n";
  // No machine has device 1000.
  test::expect_error([] { make_cuda_provider(1000); }, "no CUDA device");
  SessionOptions far;
  far.providers = {"cuda", "cpu"};
  far.device_id = 1000;
  test::expect_error([&] { relu_session(far); }, "no CUDA device");

  SessionOptions o;
  o.providers = {"cuda"};  // "cpu" is appended
  if (!have_device()) {
    test::expect_error([] { make_cuda_provider(0); }, "no CUDA device");
    test::expect_error([&] { relu_session(o); }, "no CUDA device");
    if (!built_with_cuda()) {
      EXPECT_TRUE(cuda_kernel_registry().defs().empty());
      test::expect_error([&] { relu_session(o); }, "no CUDA provider");
    }
    return;
  }
  EXPECT_TRUE(built_with_cuda());
  auto provider = make_cuda_provider(0);
  EXPECT_EQ(provider->name(), "cuda");
  EXPECT_EQ(provider->device().type, DeviceType::CUDA);
  Session s = relu_session(o);
  auto y = s.run({{"x", Tensor::from_vector<float>({4}, {-1, 2, -3, 4})}}).at("y");
  EXPECT_EQ(y.to_double_vector(), (std::vector<double>{0, 2, 0, 4}));
  expect_on_cuda(s, "Relu");
}

}  // namespace
}  // namespace onyx
