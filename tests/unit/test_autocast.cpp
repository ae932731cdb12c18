// The autocast pass (graph/autocast.h): the policy table per op, one cast per value and
// type, float32 where the policy says so, graph interface kept, idempotence, and sessions
// built with SessionOptions::precision.
#include "graph/autocast.h"
#include "graph/onnx_io.h"
#include "graph/shape_inference.h"
#include "test_util.h"

namespace onyx::test {
namespace {

/// x[4,16] -> MatMul W1 -> Add b1 -> Relu -> MatMul W2 -> Add b2 -> Softmax -> y, plus the
/// logits z as a second output: a Linear-ReLU-Linear head as torch.onnx writes it.
std::unique_ptr<Model> mlp(bool tied = false) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{4, 16});
  b.initializer("W1", random_normal({16, 16}, 1, 0.3f));
  b.initializer("b1", random_normal({16}, 2));
  if (!tied) b.initializer("W2", random_normal({16, 16}, 3, 0.3f));
  b.initializer("b2", random_normal({16}, 4));
  b.node("MatMul", {"x", "W1"}, {"h0"});
  b.node("Add", {"h0", "b1"}, {"h1"});
  b.node("Relu", {"h1"}, {"h2"});
  b.node("MatMul", {"h2", tied ? "W1" : "W2"}, {"h3"});
  b.node("Add", {"h3", "b2"}, {"z"});
  b.node("Softmax", {"z"}, {"y"});
  b.output("y");
  b.output("z");
  auto m = b.build();
  infer_types_and_shapes(*m);
  return m;
}

const Node* producer(const Model& m, const std::string& value) {
  const Value* v = m.graph->find_value(value);
  return v ? v->producer : nullptr;
}

DataType input_dtype(const Node& n, int i) { return n.inputs.at(i)->type.elem; }

size_t count_op(const Model& m, const std::string& op) {
  size_t k = 0;
  for (const auto& n : m.graph->nodes()) k += n->op_type == op;
  return k;
}

TEST(Autocast, PolicyTableLowersProductsKeepsSoftmaxInFloat32) {
  EXPECT_EQ(autocast_policy("", "MatMul"), CastPolicy::Lower);
  EXPECT_EQ(autocast_policy("", "Conv"), CastPolicy::Lower);
  EXPECT_EQ(autocast_policy("ai.onnx", "Gemm"), CastPolicy::Lower);
  EXPECT_EQ(autocast_policy("", "Softmax"), CastPolicy::Float32);
  EXPECT_EQ(autocast_policy("", "LayerNormalization"), CastPolicy::Float32);
  EXPECT_EQ(autocast_policy("", "ReduceMean"), CastPolicy::Float32);
  EXPECT_EQ(autocast_policy("", "Exp"), CastPolicy::Float32);
  EXPECT_EQ(autocast_policy("", "Relu"), CastPolicy::Follow);
  EXPECT_EQ(autocast_policy("com.microsoft", "FusedMatMul"), CastPolicy::Lower);
}

TEST(Autocast, RewritesAnMlpHeadPerPolicy) {
  auto m = mlp();
  AutocastReport r = autocast(*m, Precision::BFloat16);
  for (const char* mm : {"h0", "h3"}) {
    const Node* n = producer(*m, mm);
    ASSERT_NE(n, nullptr);
    EXPECT_EQ(input_dtype(*n, 0), DataType::BFloat16) << mm;
    EXPECT_EQ(input_dtype(*n, 1), DataType::BFloat16) << mm;
    EXPECT_EQ(m->graph->find_value(mm)->type.elem, DataType::BFloat16);
  }
  // Add follows the matmul (its bias, a constant, is cast down); Relu follows Add.
  EXPECT_EQ(m->graph->find_value("h1")->type.elem, DataType::BFloat16);
  EXPECT_EQ(input_dtype(*producer(*m, "h1"), 1), DataType::BFloat16);
  EXPECT_EQ(m->graph->find_value("h2")->type.elem, DataType::BFloat16);
  // Softmax runs in float32; both graph outputs keep their name and float32 type.
  EXPECT_EQ(input_dtype(*producer(*m, "y"), 0), DataType::Float);
  EXPECT_EQ(producer(*m, "y")->op_type, "Softmax");
  EXPECT_EQ(m->graph->find_value("y")->type.elem, DataType::Float);
  EXPECT_EQ(m->graph->find_value("z")->type.elem, DataType::Float);
  EXPECT_EQ(producer(*m, "z")->op_type, "Cast");
  ASSERT_EQ(m->graph->outputs.size(), 2u);
  EXPECT_EQ(m->graph->outputs[0]->name, "y");
  EXPECT_EQ(m->graph->outputs[1]->name, "z");
  // Casts: x, W1, b1, W2, b2 down; z back up once, shared by Softmax and the output.
  EXPECT_EQ(r.casts, 6u);
  EXPECT_EQ(count_op(*m, "Cast"), 6u);
  EXPECT_EQ(r.lowered, 5u);   // 2 MatMul, 2 Add, Relu
  EXPECT_EQ(r.float32, 1u);   // Softmax
}

TEST(Autocast, AWeightReadTwiceIsCastOnce) {
  auto m = mlp(/*tied=*/true);
  autocast(*m, Precision::Float16);
  size_t casts_of_w1 = 0;
  for (const auto& n : m->graph->nodes())
    if (n->op_type == "Cast" && n->inputs[0]->name == "W1") ++casts_of_w1;
  EXPECT_EQ(casts_of_w1, 1u);
  EXPECT_EQ(input_dtype(*producer(*m, "h0"), 1), DataType::Float16);
  EXPECT_EQ(producer(*m, "h0")->inputs[1], producer(*m, "h3")->inputs[1]);
}

TEST(Autocast, RunningItAgainChangesNothing) {
  auto m = mlp();
  autocast(*m, Precision::BFloat16);
  size_t nodes = m->graph->num_nodes();
  AutocastReport again = autocast(*m, Precision::BFloat16);
  EXPECT_EQ(again.casts, 0u);
  EXPECT_EQ(m->graph->num_nodes(), nodes);
  // Also after a save and reload (types re-inferred from the file).
  std::string bytes = serialize_model(*m);
  auto back = load_model_from_bytes(bytes.data(), bytes.size());
  infer_types_and_shapes(*back);
  EXPECT_EQ(autocast(*back, Precision::BFloat16).casts, 0u);
}

TEST(Autocast, Float32IsANoOp) {
  auto m = mlp();
  size_t nodes = m->graph->num_nodes();
  EXPECT_EQ(autocast(*m, Precision::Float32).casts, 0u);
  EXPECT_EQ(m->graph->num_nodes(), nodes);
}

TEST(Autocast, OpsTheProviderCannotRunStayInFloat32) {
  auto m = mlp();
  AutocastOptions o;
  o.supports = [](const Node& n, DataType) { return n.op_type != "Relu"; };
  autocast(*m, Precision::BFloat16, o);
  EXPECT_EQ(input_dtype(*producer(*m, "h2"), 0), DataType::Float);
  EXPECT_EQ(m->graph->find_value("h2")->type.elem, DataType::Float);
  // The next MatMul casts Relu's float32 output down again.
  EXPECT_EQ(input_dtype(*producer(*m, "h3"), 0), DataType::BFloat16);
}

TEST(Autocast, ResidualAddOfFloat32AndLowRunsInFloat32) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2, 8});
  b.initializer("W", random_normal({8, 8}, 5));
  b.node("MatMul", {"x", "W"}, {"h"});
  b.node("Add", {"x", "h"}, {"r"});
  b.output("r");
  auto m = b.build();
  infer_types_and_shapes(*m);
  autocast(*m, Precision::BFloat16);
  const Node* add = producer(*m, "r");
  ASSERT_EQ(add->op_type, "Add");
  EXPECT_EQ(input_dtype(*add, 0), DataType::Float);
  EXPECT_EQ(input_dtype(*add, 1), DataType::Float);
  EXPECT_EQ(m->graph->find_value("r")->type.elem, DataType::Float);
}

TEST(Autocast, LayerNormStatisticsAndNonFloatInputsKeepTheirTypes) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2, 8});
  b.input("idx", DataType::Int64, Shape{3});
  b.initializer("W", random_normal({8, 8}, 6));
  b.initializer("g", random_normal({8}, 7));
  b.initializer("beta", random_normal({8}, 8));
  b.node("MatMul", {"x", "W"}, {"h"});
  set_attrs(b.node("LayerNormalization", {"h", "g", "beta"}, {"n", "mean", "rstd"}), {attr_int("axis", -1)});
  set_attrs(b.node("Gather", {"h", "idx"}, {"rows"}), {attr_int("axis", 1)});
  b.output("n");
  b.output("mean");
  b.output("rows");
  auto m = b.build();
  infer_types_and_shapes(*m);
  autocast(*m, Precision::BFloat16);
  const Node* ln = producer(*m, "n");
  ASSERT_EQ(ln->op_type, "LayerNormalization");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(input_dtype(*ln, i), DataType::Float) << i;
  EXPECT_EQ(m->graph->find_value("mean")->type.elem, DataType::Float);
  const Node* gather = producer(*m, "rows")->op_type == "Cast" ? producer(*m, "rows")->inputs[0]->producer
                                                               : producer(*m, "rows");
  ASSERT_EQ(gather->op_type, "Gather");
  EXPECT_EQ(input_dtype(*gather, 0), DataType::BFloat16);
  EXPECT_EQ(input_dtype(*gather, 1), DataType::Int64);
  EXPECT_EQ(m->graph->find_value("rows")->type.elem, DataType::Float);
}

TEST(Autocast, ValuesASubgraphReadsStayFloat32) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2, 4});
  b.input("c", DataType::Bool, Shape{});
  b.initializer("W", random_normal({4, 4}, 9));
  b.node("MatMul", {"x", "W"}, {"h"});
  auto then_g = std::make_shared<Graph>("then");
  auto else_g = std::make_shared<Graph>("else");
  for (auto* sg : {then_g.get(), else_g.get()}) {
    Value* out = sg->get_or_add_value(sg == then_g.get() ? "t_out" : "e_out");
    out->type = ValueType::tensor(DataType::Float);
    sg->add_node(sg == then_g.get() ? "Relu" : "Neg", {sg->get_or_add_value("h")}, {out});
    sg->outputs.push_back(out);
  }
  Node& iff = b.node("If", {"c"}, {"y"});
  for (auto [name, sg] : {std::pair{"then_branch", then_g}, std::pair{"else_branch", else_g}}) {
    Attribute a;
    a.name = name;
    a.type = Attribute::Type::Graph;
    a.g = sg;
    iff.attrs[name] = a;
  }
  b.output("y");
  auto m = b.build();
  Graph& g = *m->graph;
  g.add_implicit_input(g.find_value("y")->producer, g.find_value("h"));
  then_g->parent = else_g->parent = &g;
  infer_types_and_shapes(*m);
  autocast(*m, Precision::BFloat16);
  EXPECT_EQ(g.find_value("h")->type.elem, DataType::Float);
  EXPECT_EQ(input_dtype(*producer(*m, "h"), 0), DataType::Float);
  // The model still runs.
  SessionOptions so;
  so.intra_op_threads = 1;
  Session s(std::move(m), so);
  auto out = s.run({{"x", random_normal({2, 4}, 10)}, {"c", Tensor::from_vector<bool>({}, {true})}});
  EXPECT_EQ(out.at("y").dtype(), DataType::Float);
}

TEST(Autocast, ParsePrecisionNamesTheChoices) {
  EXPECT_EQ(parse_precision("bf16"), Precision::BFloat16);
  EXPECT_EQ(parse_precision("float16"), Precision::Float16);
  EXPECT_EQ(parse_precision("fp32"), Precision::Float32);
  try {
    parse_precision("fp8");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("expected fp32, bf16 or fp16"), std::string::npos) << e.what();
  }
}

/// A session with precision bf16/fp16 keeps the interface and stays close to float32.
/// torch.onnx's nn.Linear on 3-D input: y = MatMul(Reshape(x) in attention's spelling,
/// Transpose(W)); the second output `t` (with `t_out`) also reads W's Transpose in float32.
std::unique_ptr<Model> linear_3d(bool t_out) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2, 3, 8});
  b.initializer("W", random_normal({6, 8}, 21, 0.3f));
  b.initializer("shape", Tensor::from_vector<int64_t>({2}, {6, 8}));
  b.node("Transpose", {"W"}, {"Wt"}).attrs["perm"] = attr_ints("perm", {1, 0});
  b.node("Reshape", {"x", "shape"}, {"xr"});
  b.node("Identity", {"xr"}, {"xi"});
  b.node("MatMul", {"xi", "Wt"}, {"y"});
  b.output("y");
  if (t_out) b.output("Wt");
  auto m = b.build();
  infer_types_and_shapes(*m);
  return m;
}

// A cast to the low type after ops that only move elements (Transpose, Reshape, Identity, ...)
// moves before them: the weight's Cast reads the weight (so a training run refreshes it from the
// optimizer's copy) and the Transpose moves 16-bit data and can fold into the product. Same
// values; not where the moved value is also read in float32.
TEST(Autocast, CastsMoveAboveOpsThatOnlyMoveElements) {
  auto m = linear_3d(false);
  autocast(*m, Precision::BFloat16);
  const Node* t = producer(*m, "Wt");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->op_type, "Transpose");
  EXPECT_EQ(m->graph->find_value("Wt")->type.elem, DataType::BFloat16);
  const Node* w_cast = t->inputs[0]->producer;
  ASSERT_NE(w_cast, nullptr);
  EXPECT_EQ(w_cast->op_type, "Cast");
  EXPECT_EQ(w_cast->inputs[0]->name, "W");
  // The activation too: x is cast, then reshaped and passed through Identity in bf16.
  EXPECT_EQ(m->graph->find_value("xr")->type.elem, DataType::BFloat16);
  EXPECT_EQ(m->graph->find_value("xi")->type.elem, DataType::BFloat16);
  EXPECT_EQ(producer(*m, "xr")->inputs[0]->producer->op_type, "Cast");
  EXPECT_EQ(count_op(*m, "Cast"), 3u);  // x, W, and y back to float32
  EXPECT_EQ(autocast(*m, Precision::BFloat16).casts, 0u);  // idempotent
  // The session computes what the old spelling (cast after the Transpose) computed: rounding
  // commutes with moving elements.
  SessionOptions so;
  so.precision = Precision::BFloat16;
  Tensor x = random_normal({2, 3, 8}, 22);
  auto got = Session(linear_3d(false), so).run({{"x", x}}).at("y");
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2, 3, 8});
  b.initializer("W", random_normal({6, 8}, 21, 0.3f));
  b.initializer("shape", Tensor::from_vector<int64_t>({2}, {6, 8}));
  b.node("Transpose", {"W"}, {"Wt"}).attrs["perm"] = attr_ints("perm", {1, 0});
  b.node("Cast", {"Wt"}, {"Wt16"}).attrs["to"] = attr_int("to", static_cast<int64_t>(DataType::BFloat16));
  b.node("Reshape", {"x", "shape"}, {"xr"});
  b.node("Cast", {"xr"}, {"xr16"}).attrs["to"] = attr_int("to", static_cast<int64_t>(DataType::BFloat16));
  b.node("MatMul", {"xr16", "Wt16"}, {"y16"});
  b.node("Cast", {"y16"}, {"y"}).attrs["to"] = attr_int("to", static_cast<int64_t>(DataType::Float));
  b.output("y");
  expect_same_bits(got, b.session().run({{"x", x}}).at("y"), "y");
  // W's transpose is also an output (read in float32): its cast stays after it.
  auto kept = linear_3d(true);
  autocast(*kept, Precision::BFloat16);
  EXPECT_EQ(kept->graph->find_value("Wt")->type.elem, DataType::Float);
  EXPECT_EQ(producer(*kept, "Wt")->inputs[0]->name, "W");
}

TEST(Autocast, SessionPrecisionKeepsInterfaceAndAccuracy) {
  Tensor x = random_normal({4, 16}, 11);
  SessionOptions so;
  so.intra_op_threads = 1;
  Session f32(mlp(), so);
  auto want = f32.run({{"x", x}});
  for (Precision p : {Precision::BFloat16, Precision::Float16}) {
    so.precision = p;
    Session low(mlp(), so);
    ASSERT_EQ(low.outputs().size(), 2u);
    auto got = low.run({{"x", x}});
    for (const char* o : {"y", "z"}) {
      ASSERT_EQ(got.at(o).dtype(), DataType::Float) << o;
      auto a = got.at(o).to_double_vector(), w = want.at(o).to_double_vector();
      double tol = p == Precision::BFloat16 ? 5e-2 : 5e-3;
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - w[i]) / (1.0 + std::abs(w[i])));
      EXPECT_LT(worst, tol) << precision_name(p) << " " << o;
      EXPECT_GT(worst, 0.0) << precision_name(p) << " " << o << ": ran in float32?";
    }
  }
}

}  // namespace
}  // namespace onyx::test
