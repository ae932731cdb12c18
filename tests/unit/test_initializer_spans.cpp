// graph/initializer_spans.cpp: large initializers' raw_data is cut out before protobuf parses a
// model and copied once into the tensors; the loaded model is the same as protobuf's own parse
// would give, for every layout protobuf accepts, and malformed bytes still get protobuf's error.
#include <onnx/onnx_pb.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "graph/initializer_spans.h"
#include "graph/onnx_io.h"
#include "test_util.h"

namespace onyx {
namespace {

std::string float_bytes(size_t n, float start) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = start + 0.25f * static_cast<float>(i % 97);
  return std::string(reinterpret_cast<const char*>(v.data()), n * sizeof(float));
}

/// y = (x + big) * small, big [n] from raw_data, small [n] from float_data or small raw_data.
onnx::ModelProto model_with(size_t n, bool small_raw) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("spans");
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(
      static_cast<int64_t>(n));
  auto* big = g->add_initializer();
  big->set_name("big");
  big->set_data_type(onnx::TensorProto::FLOAT);
  big->add_dims(static_cast<int64_t>(n));
  big->set_raw_data(float_bytes(n, 1.0f));
  auto* small = g->add_initializer();
  small->set_name("small");
  small->set_data_type(onnx::TensorProto::FLOAT);
  small->add_dims(static_cast<int64_t>(n));
  if (small_raw) {
    small->set_raw_data(float_bytes(n, -2.0f));
  } else {
    for (size_t i = 0; i < n; ++i) small->add_float_data(0.5f);
  }
  auto* a = g->add_node();
  a->set_op_type("Add");
  a->add_input("x");
  a->add_input("big");
  a->add_output("s");
  auto* mul = g->add_node();
  mul->set_op_type("Mul");
  mul->add_input("s");
  mul->add_input("small");
  mul->add_output("y");
  g->add_output()->set_name("y");
  return m;
}

void expect_same_initializers(const Model& got, const onnx::ModelProto& want) {
  for (const auto& init : want.graph().initializer()) {
    SCOPED_TRACE(init.name());
    const Tensor& t = got.graph->initializers.at(init.name());
    ASSERT_EQ(t.numel(), init.dims(0));
    if (init.has_raw_data()) {
      ASSERT_EQ(t.nbytes(), init.raw_data().size());
      EXPECT_EQ(std::memcmp(t.raw(), init.raw_data().data(), t.nbytes()), 0);
    } else {
      for (int64_t i = 0; i < t.numel(); ++i) EXPECT_EQ(t.data<float>()[i], init.float_data(int(i)));
    }
  }
}

TEST(InitializerSpans, LargeRawDataIsCutOutAndLoadsTheSame) {
  const onnx::ModelProto m = model_with(2048, /*small_raw=*/false);  // big: 8 KiB of raw_data
  const std::string bytes = m.SerializeAsString();
  auto stripped = strip_initializer_raw_data(bytes, 4096);
  ASSERT_TRUE(stripped);
  ASSERT_EQ(stripped->raw.size(), 2u);
  ASSERT_TRUE(stripped->raw[0]);
  EXPECT_EQ(*stripped->raw[0], m.graph().initializer(0).raw_data());
  EXPECT_FALSE(stripped->raw[1]);  // float_data stays where it is
  EXPECT_LT(stripped->compact.size() + 8192, bytes.size() + 16);
  // The compact bytes are a valid model that lacks only big's raw_data.
  onnx::ModelProto compact;
  ASSERT_TRUE(compact.ParseFromString(stripped->compact));
  EXPECT_FALSE(compact.graph().initializer(0).has_raw_data());
  EXPECT_EQ(compact.graph().initializer(1).float_data_size(), 2048);
  EXPECT_EQ(compact.graph().node_size(), 2);

  auto model = load_model_from_bytes(bytes.data(), bytes.size());
  expect_same_initializers(*model, m);
  // Through a file (the mapped path) too, and the model runs.
  const auto path = std::filesystem::temp_directory_path() /
                    ("onyx_spans_" + std::to_string(getpid()) + ".onnx");
  std::ofstream(path, std::ios::binary) << bytes;
  Session s(path.string(), {});
  std::filesystem::remove(path);
  Tensor x = Tensor::from_vector<float>({2048}, std::vector<float>(2048, 1.0f));
  Tensor y = s.run({{"x", x}}).at("y");
  EXPECT_FLOAT_EQ(y.data<float>()[5], (1.0f + 1.0f + 0.25f * 5) * 0.5f);
  // A FIFO cannot be mapped: it is read instead, with the same result.
  const auto fifo = std::filesystem::temp_directory_path() /
                    ("onyx_spans_fifo_" + std::to_string(getpid()));
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::thread writer([&] { std::ofstream(fifo, std::ios::binary) << bytes; });
  auto piped = load_model(fifo.string());
  writer.join();
  std::filesystem::remove(fifo);
  expect_same_initializers(*piped, m);
}

// clone_model passes the main graph's numeric weights around the proto (spans into the original
// tensors, copied once): every dtype comes back equal (strings and packed int4 through the
// proto), in storage of its own, and the copy runs like the original.
TEST(InitializerSpans, CloneCopiesEachWeightOnceIntoItsOwnStorage) {
  const onnx::ModelProto m = model_with(4096, /*small_raw=*/true);
  const std::string bytes = m.SerializeAsString();
  auto original = load_model_from_bytes(bytes.data(), bytes.size());
  Graph& g = *original->graph;
  Tensor names = Tensor::empty(DataType::String, {2});
  names.data<std::string>()[0] = "a";
  names.data<std::string>()[1] = "bc";
  g.add_initializer("names", names);
  Tensor nibbles = Tensor::empty(DataType::Int4, {5});
  for (int i = 0; i < 5; ++i) nibbles.data_as<int8_t>()[i] = static_cast<int8_t>(i - 2);
  g.add_initializer("nibbles", nibbles);
  g.add_initializer("counts", Tensor::from_vector<int64_t>({3}, {7, -8, 9}));

  auto copy = clone_model(*original);
  ASSERT_EQ(copy->graph->initializers.size(), g.initializers.size());
  for (const auto& [name, t] : g.initializers) {
    SCOPED_TRACE(name);
    const Tensor& c = copy->graph->initializers.at(name);
    ASSERT_EQ(c.dtype(), t.dtype());
    ASSERT_EQ(c.shape(), t.shape());
    if (t.dtype() == DataType::String) {
      for (int64_t i = 0; i < t.numel(); ++i)
        EXPECT_EQ(c.data<std::string>()[i], t.data<std::string>()[i]);
    } else {
      EXPECT_EQ(std::memcmp(c.raw(), t.raw(), t.nbytes()), 0);
      EXPECT_NE(c.raw(), t.raw()) << "the copy shares the original's storage";
    }
  }
  // Writing the original leaves the copy as it was.
  const float before = copy->graph->initializers.at("big").data<float>()[0];
  g.initializers.at("big").data<float>()[0] = -1e6f;
  EXPECT_EQ(copy->graph->initializers.at("big").data<float>()[0], before);
  copy->graph->initializers.erase("names");
  copy->graph->initializers.erase("nibbles");
  copy->graph->initializers.erase("counts");
  Session s(std::move(copy));
  Tensor x = Tensor::zeros(DataType::Float, {4096});
  Tensor y = s.run({{"x", x}}).at("y");
  EXPECT_FLOAT_EQ(y.data<float>()[1], (1.0f + 0.25f) * (-2.0f + 0.25f));
}

TEST(InitializerSpans, ThresholdRepeatedRawDataAndFieldOrder) {
  // Both initializers carry raw_data; only the one at the threshold or above is cut.
  onnx::ModelProto m = model_with(1024, /*small_raw=*/true);  // 4 KiB each
  auto stripped = strip_initializer_raw_data(m.SerializeAsString(), 4097);
  ASSERT_TRUE(stripped);
  EXPECT_FALSE(stripped->raw[0]);
  EXPECT_FALSE(stripped->raw[1]);
  stripped = strip_initializer_raw_data(m.SerializeAsString(), 4096);
  EXPECT_TRUE(stripped->raw[0] && stripped->raw[1]);

  // raw_data written twice in one TensorProto: protobuf keeps the last; so must we. And fields
  // in any order: the initializer before the graph's name and nodes, the graph before the
  // opset import.
  onnx::TensorProto first;
  first.set_raw_data(float_bytes(1024, 100.0f));  // replaced by the initializer's own
  onnx::GraphProto graph_tail = m.graph();
  graph_tail.clear_initializer();
  std::string big_twice = first.SerializeAsString() + m.graph().initializer(0).SerializeAsString();
  // Hand-written wire bytes: initializer(5) whose payload holds raw_data twice, then the rest.
  std::string graph_bytes;
  auto put_field = [](std::string& out, int number, const std::string& payload) {
    out.push_back(static_cast<char>((number << 3) | 2));
    size_t n = payload.size();
    while (n >= 0x80) {
      out.push_back(static_cast<char>((n & 0x7f) | 0x80));
      n >>= 7;
    }
    out.push_back(static_cast<char>(n));
    out += payload;
  };
  put_field(graph_bytes, 5, big_twice);
  put_field(graph_bytes, 5, m.graph().initializer(1).SerializeAsString());
  graph_bytes += graph_tail.SerializeAsString();
  onnx::ModelProto header = m;
  header.clear_graph();
  header.clear_opset_import();
  std::string model_bytes;
  put_field(model_bytes, 7, graph_bytes);
  model_bytes += header.SerializeAsString();
  onnx::ModelProto opset;
  *opset.add_opset_import() = m.opset_import(0);
  model_bytes += opset.SerializeAsString();

  onnx::ModelProto want;
  ASSERT_TRUE(want.ParseFromString(model_bytes));
  EXPECT_EQ(want.graph().initializer(0).raw_data(), m.graph().initializer(0).raw_data());
  auto model = load_model_from_bytes(model_bytes.data(), model_bytes.size());
  expect_same_initializers(*model, want);
  EXPECT_EQ(model->graph->num_nodes(), 2u);
}

// Found by the model fuzz target (heap-use-after-free): two initializers of one name, the first
// replaced by the second before its deferred copy ran. The last one wins, as before.
TEST(InitializerSpans, RepeatedInitializerNameKeepsTheLast) {
  onnx::ModelProto m = model_with(2048, /*small_raw=*/true);
  m.mutable_graph()->mutable_initializer(1)->set_name("big");
  m.mutable_graph()->mutable_initializer(1)->set_raw_data(float_bytes(2048, 7.0f));
  auto* n = m.mutable_graph()->mutable_node(1);
  n->set_input(1, "big");
  const std::string bytes = m.SerializeAsString();
  auto model = load_model_from_bytes(bytes.data(), bytes.size());
  const Tensor& t = model->graph->initializers.at("big");
  EXPECT_EQ(t.data<float>()[0], 7.0f);
  EXPECT_EQ(t.data<float>()[3], 7.75f);
}

TEST(InitializerSpans, MalformedBytesKeepProtobufsErrorAndSizesAreChecked) {
  const std::string bytes = model_with(2048, false).SerializeAsString();
  // Truncated inside big's raw_data: the scan gives up, protobuf names the problem.
  EXPECT_FALSE(strip_initializer_raw_data(bytes.substr(0, bytes.size() / 2)));
  test::expect_error(
      [&] {
        const std::string half = bytes.substr(0, bytes.size() / 2);
        load_model_from_bytes(half.data(), half.size());
      },
      "not a valid ONNX model");
  test::expect_error([&] { load_model_from_bytes("", 0); }, "is empty");
  // A cut-out raw_data of the wrong size is refused with the same words as an inline one.
  onnx::ModelProto m = model_with(2048, false);
  m.mutable_graph()->mutable_initializer(0)->set_dims(0, 4096);
  const std::string wrong = m.SerializeAsString();
  test::expect_error([&] { load_model_from_bytes(wrong.data(), wrong.size()); },
                     "raw data has 8192 bytes, but its shape [4096] of float needs 16384 bytes");
}

}  // namespace
}  // namespace onyx
