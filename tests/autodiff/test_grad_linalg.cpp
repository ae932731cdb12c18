// Finite-difference checks of the linalg gradient rules (float64).
#include "grad_check.h"
#include "graph/error.h"
#include "save_reload_check.h"

namespace onyx::test {

using test::attr_float;
using test::attr_int;
using test::attr_string;

TEST(GradLinalg, MatMul2DAndBatched) {
  check_gradient({.op = "MatMul", .inputs = {P("a", {3, 4}), P("b", {4, 5})}});
  // Batched activations times a shared weight (the folded-rows path for b).
  check_gradient({.op = "MatMul", .inputs = {P("a", {2, 3, 4}), P("b", {4, 5})}});
  check_gradient({.op = "MatMul", .inputs = {P("a", {2, 2, 3, 4}), P("b", {4, 2})}});
  check_gradient({.op = "MatMul", .inputs = {P("a", {2, 3, 4}), P("b", {2, 4, 5})}});
}

TEST(GradLinalg, MatMulBatchBroadcasting) {
  check_gradient({.op = "MatMul", .inputs = {P("a", {2, 1, 3, 4}), P("b", {5, 4, 2})}});
  check_gradient({.op = "MatMul", .inputs = {P("a", {3, 4}), P("b", {2, 4, 5})}});
  check_gradient({.op = "MatMul", .inputs = {P("a", {1, 3, 4}), P("b", {3, 4, 2})}});
}

TEST(GradLinalg, MatMulVectors) {
  check_gradient({.op = "MatMul", .inputs = {P("a", {4}), P("b", {4, 5})}});
  check_gradient({.op = "MatMul", .inputs = {P("a", {3, 4}), P("b", {4})}});
  check_gradient({.op = "MatMul", .inputs = {P("a", {4}), P("b", {4})}});
  check_gradient({.op = "MatMul", .inputs = {P("a", {4}), P("b", {2, 4, 5})}});
  check_gradient({.op = "MatMul", .inputs = {P("a", {2, 3, 4}), P("b", {4})}});
}

TEST(GradLinalg, GemmTransposesAndScales) {
  for (int ta : {0, 1})
    for (int tb : {0, 1}) {
      SCOPED_TRACE(fmt::format("transA={} transB={}", ta, tb));
      Shape sa = ta ? Shape{4, 3} : Shape{3, 4};
      Shape sb = tb ? Shape{5, 4} : Shape{4, 5};
      check_gradient({.op = "Gemm",
                      .inputs = {P("a", sa), P("b", sb)},
                      .attrs = {attr_int("transA", ta), attr_int("transB", tb)}});
      check_gradient({.op = "Gemm",
                      .inputs = {P("a", sa), P("b", sb), P("c", {3, 5})},
                      .attrs = {attr_int("transA", ta), attr_int("transB", tb), attr_float("alpha", 0.5),
                                attr_float("beta", 2.0)}});
    }
}

TEST(GradLinalg, GemmBroadcastC) {
  for (Shape sc : {Shape{}, Shape{5}, Shape{1, 5}, Shape{3, 1}, Shape{1, 1}, Shape{3, 5}}) {
    SCOPED_TRACE(shape_str(sc));
    check_gradient({.op = "Gemm",
                    .inputs = {P("a", {3, 4}), P("b", {5, 4}), P("c", sc)},
                    .attrs = {attr_int("transB", 1), attr_float("alpha", -1.5), attr_float("beta", 0.25)}});
  }
  // C fixed, only A and B trained.
  check_gradient(
      {.op = "Gemm",
       .inputs = {P("a", {2, 3}), P("b", {3, 2}), C("c", {2}, {1, -1}, DataType::Double)}});
}

TEST(GradLinalg, EinsumContractions) {
  struct Case {
    const char* eq;
    std::vector<Shape> shapes;
  };
  std::vector<Case> cases = {
      {"ij,jk->ik", {{3, 4}, {4, 2}}},
      {"bij,bjk->bik", {{2, 3, 4}, {2, 4, 2}}},
      {"ij->ji", {{3, 4}}},
      {"i,j->ij", {{3}, {4}}},
      {"ij,ij->i", {{3, 4}, {3, 4}}},
      {"ij,jk", {{2, 3}, {3, 4}}},  // implicit output "ik"
      {"ba,ca", {{2, 3}, {4, 3}}},  // implicit output "bc"
      {"ij->", {{3, 4}}},           // summed letters only the operand has
      {"ij,j->j", {{3, 4}, {4}}},   // i summed away, broadcast back
      {"abc,cd,de->ae", {{2, 3, 4}, {4, 2}, {2, 3}}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.eq);
    std::vector<GradInput> ins;
    for (size_t k = 0; k < c.shapes.size(); ++k)
      ins.push_back(P(fmt::format("x{}", k), c.shapes[k]));
    check_gradient({.op = "Einsum", .inputs = ins, .attrs = {attr_string("equation", c.eq)}});
  }
}

TEST(GradLinalg, EinsumDiagonals) {
  for (const char* eq : {"ii->i", "ii->", "bii->bi", "iij,j->i"}) {
    SCOPED_TRACE(eq);
    std::vector<GradInput> ins;
    if (std::string(eq) == "bii->bi")
      ins = {P("x", {2, 3, 3})};
    else if (std::string(eq) == "iij,j->i")
      ins = {P("x", {3, 3, 2}), P("y", {2})};
    else
      ins = {P("x", {3, 3})};
    check_gradient({.op = "Einsum", .inputs = ins, .attrs = {attr_string("equation", eq)}});
  }
  check_gradient(
      {.op = "Einsum", .inputs = {P("x", {2, 2, 2})}, .attrs = {attr_string("equation", "iii->i")}});
}

TEST(GradLinalg, EinsumEllipsis) {
  check_gradient({.op = "Einsum",
                  .inputs = {P("a", {2, 3, 4}), P("b", {4, 5})},
                  .attrs = {attr_string("equation", "...ij,jk->...ik")}});
  check_gradient({.op = "Einsum",
                  .inputs = {P("a", {2, 1, 3, 4}), P("b", {5, 4, 2})},
                  .attrs = {attr_string("equation", "...ij,...jk->...ik")}});
  check_gradient({.op = "Einsum",
                  .inputs = {P("a", {3, 2, 4}), P("b", {4})},
                  .attrs = {attr_string("equation", "i...j,j->i...")}});
  check_gradient({.op = "Einsum",
                  .inputs = {P("a", {2, 3}), P("b", {4, 1, 3})},
                  .attrs = {attr_string("equation", "...j,...j->...")}});
}

TEST(GradLinalg, EinsumSummedEllipsisIsAnError) {
  try {
    check_gradient({.op = "Einsum",
                    .inputs = {P("a", {2, 3, 4})},
                    .attrs = {attr_string("equation", "...ij->ij")}});
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[autodiff]"), std::string::npos) << e.what();
  }
}

TEST(GradLinalg, MultiOpGraphSavesAndReloads) {
  // A two-layer perceptron with an einsum head: Gemm -> MatMul (batched) -> Einsum -> loss.
  auto m = std::make_unique<Model>();
  m->ir_version = 9;
  m->opsets.push_back({"", 17});
  m->graph = std::make_unique<Graph>("linalg_chain");
  Graph& g = *m->graph;
  auto init = [&](const std::string& n, Shape s, double scale) {
    std::vector<double> v(static_cast<size_t>(shape_numel(s)));
    for (size_t i = 0; i < v.size(); ++i) v[i] = scale * (static_cast<double>(i % 7) - 3.0);
    return g.add_initializer(n, Tensor::from_vector<double>(s, v));
  };
  Value* x = init("x", {4, 3}, 0.3);
  Value* w1 = init("w1", {5, 3}, 0.1);
  Value* b1 = init("b1", {5}, 0.05);
  Value* w2 = init("w2", {2, 5, 2}, 0.2);
  Value* w3 = init("w3", {2}, 0.5);
  auto node = [&](const std::string& op, std::vector<Value*> ins, autodiff::Attrs attrs = {}) {
    Value* out = g.add_unique_value(op + "_out");
    Node* n = g.add_node(op, ins, {out}, "", out->name);
    for (auto& a : attrs) n->attrs[a.name] = a;
    return out;
  };
  Value* h = node("Gemm", {x, w1, b1}, {attr_int("transB", 1), attr_float("alpha", 0.5)});  // [4,5]
  Value* h2 = node("MatMul", {h, w2});                                                // [2,4,2]
  Value* e = node("Einsum", {h2, w3}, {attr_string("equation", "bij,j->bi")});             // [2,4]
  Value* sq = node("Mul", {e, e});
  Value* L = g.get_or_add_value("L");
  g.add_node("ReduceSum", {sq}, {L}, "", "L")->attrs["keepdims"] = attr_int("keepdims", 0);
  g.outputs.push_back(L);
  expect_same_after_save_reload(*m, {.kind = "output", .output = "L"},
                                {"x", "w1", "b1", "w2", "w3"});
}

}  // namespace onyx::test
