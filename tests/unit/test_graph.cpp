// graph/: loading, saving, validation errors, external data, functions, shape inference.
#include <onnx/onnx_pb.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "graph/onnx_io.h"
#include "kernels/arena.h"
#include "graph/shape_inference.h"
#include "test_util.h"

namespace fs = std::filesystem;
using namespace onyx;
using onyx::test::ModelBuilder;

namespace {

fs::path temp_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("onyx_test_" + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

void write_bytes(const fs::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// x[2,3] + w (initializer) -> Relu -> y
std::unique_ptr<Model> add_relu_model() {
  ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::symbol("batch"), Dim::fixed(3)});
  b.initializer("w", Tensor::from_vector<float>({3}, {1.f, -2.f, 3.f}));
  b.node("Add", {"x", "w"}, {"s"});
  b.node("Relu", {"s"}, {"y"});
  b.output("y");
  return b.build();
}

// A ModelProto with x + w where w lives in an external file at `location`.
onnx::ModelProto external_model(const std::string& location) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->set_name("ext");
  auto* in = g->add_input();
  in->set_name("x");
  in->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  in->mutable_type()->mutable_tensor_type()->mutable_shape()->add_dim()->set_dim_value(4);
  auto* w = g->add_initializer();
  w->set_name("w");
  w->set_data_type(1);
  w->add_dims(4);
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = w->add_external_data();
  kv->set_key("location");
  kv->set_value(location);
  auto* n = g->add_node();
  n->set_op_type("Add");
  n->add_input("x");
  n->add_input("w");
  n->add_output("y");
  g->add_output()->set_name("y");
  return m;
}

void write_weights(const fs::path& p) {
  float w[4] = {1, 2, 3, 4};
  write_bytes(p, std::string(reinterpret_cast<char*>(w), sizeof w));
}

}  // namespace

TEST(Graph, SaveLoadRoundTripKeepsGraph) {
  auto m = add_relu_model();
  std::string bytes = serialize_model(*m);
  auto m2 = load_model_from_bytes(bytes.data(), bytes.size());
  ASSERT_EQ(m2->graph->num_nodes(), 2u);
  EXPECT_EQ(m2->graph->nodes()[0]->op_type, "Add");
  EXPECT_EQ(m2->graph->inputs.size(), 1u);
  EXPECT_EQ(m2->graph->inputs[0]->type.shape->at(0).param, "batch");
  EXPECT_EQ(m2->graph->initializers.at("w").to_double_vector(), (std::vector<double>{1, -2, 3}));
  // load/save/load is a fixed point: saving a loaded model and loading it again gives the
  // same bytes (the first load adds inferred value_info, nothing is lost after that).
  std::string saved = serialize_model(*m2);
  auto m3 = load_model_from_bytes(saved.data(), saved.size());
  EXPECT_EQ(serialize_model(*m3), saved);
  EXPECT_EQ(m3->graph->find_value("s")->type.elem, DataType::Float);
  // And it still runs.
  Session s(std::move(m2), {});
  auto out = s.run({{"x", Tensor::from_vector<float>({2, 3}, {0, 0, 0, 1, 1, 1})}});
  onyx::test::expect_near(out.at("y"), {1, 0, 3, 2, 0, 4});
}

TEST(Graph, TopologicalOrderFromShuffledNodes) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->add_input()->set_name("x");
  g->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  auto* n2 = g->add_node();  // listed before its producer
  n2->set_op_type("Relu");
  n2->add_input("a");
  n2->add_output("y");
  auto* n1 = g->add_node();
  n1->set_op_type("Neg");
  n1->add_input("x");
  n1->add_output("a");
  g->add_output()->set_name("y");
  std::string bytes = m.SerializeAsString();
  auto model = load_model_from_bytes(bytes.data(), bytes.size());
  auto order = model->graph->topological_order();
  EXPECT_EQ(order[0]->op_type, "Neg");
  EXPECT_EQ(order[1]->op_type, "Relu");
}

TEST(GraphErrors, TruncatedFile) {
  fs::path d = temp_dir("trunc");
  std::string bytes = serialize_model(*add_relu_model());
  write_bytes(d / "m.onnx", bytes.substr(0, bytes.size() / 2));
  try {
    load_model((d / "m.onnx").string());
    FAIL() << "expected onyx::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not a valid ONNX model"), std::string::npos) << e.what();
  }
}

TEST(GraphErrors, NotOnnxAndMissingFile) {
  fs::path d = temp_dir("notonnx");
  write_bytes(d / "m.onnx", "this is plainly not a protobuf \xff\xff\xff");
  EXPECT_THROW(load_model((d / "m.onnx").string()), Error);
  try {
    load_model((d / "absent.onnx").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("file not found"), std::string::npos) << e.what();
  }
}

TEST(GraphErrors, Cycle) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* g = m.mutable_graph();
  g->add_input()->set_name("x");
  g->mutable_input(0)->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  auto* add = g->add_node();  // a = x + c, c = Relu(a)
  add->set_op_type("Add");
  add->add_input("x");
  add->add_input("c");
  add->add_output("a");
  auto* relu = g->add_node();
  relu->set_op_type("Relu");
  relu->add_input("a");
  relu->add_output("c");
  g->add_output()->set_name("c");
  std::string bytes = m.SerializeAsString();
  try {
    load_model_from_bytes(bytes.data(), bytes.size());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cycle"), std::string::npos) << e.what();
  }
}

TEST(GraphErrors, MissingProducer) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2});
  b.node("Add", {"x", "ghost"}, {"y"});
  b.output("y");
  std::string bytes = serialize_model(*b.build());
  try {
    load_model_from_bytes(bytes.data(), bytes.size());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'ghost'"), std::string::npos) << e.what();
  }
}

// onnx 1.23's helper.make_model writes IR version 14 for any opset; the next one is refused by
// name.
TEST(GraphErrors, IrVersions) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2});
  b.node("Relu", {"x"}, {"y"});
  b.output("y");
  onnx::ModelProto m;
  const std::string bytes = serialize_model(*b.build());
  ASSERT_TRUE(m.ParseFromString(bytes));
  for (int64_t ir : {3, 13, 14}) {
    m.set_ir_version(ir);
    const std::string v = m.SerializeAsString();
    EXPECT_NO_THROW(load_model_from_bytes(v.data(), v.size())) << "IR " << ir;
  }
  m.set_ir_version(15);
  const std::string v = m.SerializeAsString();
  try {
    load_model_from_bytes(v.data(), v.size());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("IR version 15; onyx reads IR versions 3 to 14"),
              std::string::npos) << e.what();
  }
}

TEST(GraphErrors, OpUnknownForOpset) {
  ModelBuilder b(17);  // Gelu arrived in opset 20
  b.input("x", DataType::Float, Shape{2});
  b.node("Gelu", {"x"}, {"y"});
  b.output("y");
  std::string bytes = serialize_model(*b.build());
  try {
    load_model_from_bytes(bytes.data(), bytes.size());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("opset 20"), std::string::npos) << e.what();
  }
}

TEST(GraphErrors, TypeMismatch) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, Shape{2});
  b.input("i", DataType::Int64, Shape{2});
  b.node("Add", {"x", "i"}, {"y"});
  b.output("y");
  std::string bytes = serialize_model(*b.build());
  try {
    load_model_from_bytes(bytes.data(), bytes.size());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("type mismatch"), std::string::npos) << e.what();
  }
}

TEST(ExternalData, LoadsFromModelFolder) {
  fs::path d = temp_dir("ext_ok");
  write_weights(d / "weights.bin");
  write_bytes(d / "m.onnx", external_model("weights.bin").SerializeAsString());
  Session s((d / "m.onnx").string());
  auto out = s.run({{"x", Tensor::from_vector<float>({4}, {1, 1, 1, 1})}});
  onyx::test::expect_near(out.at("y"), {2, 3, 4, 5});
}

// torch.onnx's default export (dynamo, external_data=True) puts every weight of any size in
// one file at byte offsets with no alignment; the loader maps each file once and leaves the
// tensors whose offset suits their type in the mapping, copying the others out on several
// threads (40 MB here: more than one thread's share) - or all of them when told not to map.
TEST(ExternalData, ManyTensorsPerFileAtUnalignedOffsetsAndSeveralFiles) {
  fs::path d = temp_dir("ext_many");
  onnx::ModelProto m = external_model("a.bin");
  auto* g = m.mutable_graph();
  g->clear_initializer();
  std::map<std::string, std::vector<float>> want;
  std::map<std::string, std::string> files;
  auto add = [&](const std::string& name, const std::string& file, int64_t count, int pad) {
    std::vector<float> v(static_cast<size_t>(count));
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i % 1000) * 0.5f + static_cast<float>(name.size());
    files[file].append(static_cast<size_t>(pad), '\x7f');  // leaves the next offset unaligned
    auto* w = g->add_initializer();
    w->set_name(name);
    w->set_data_type(1);
    w->add_dims(count);
    w->set_data_location(onnx::TensorProto::EXTERNAL);
    for (auto [k, val] : {std::pair<std::string, std::string>{"location", file},
                          {"offset", std::to_string(files[file].size())},
                          {"length", std::to_string(count * 4)}}) {
      auto* kv = w->add_external_data();
      kv->set_key(k);
      kv->set_value(val);
    }
    files[file].append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
    want[name] = std::move(v);
  };
  add("w", "a.bin", 4, 3);
  add("big", "a.bin", 6 << 20, 1);    // 24 MB
  add("tiny", "a.bin", 1, 2);
  add("mid", "b.bin", 4 << 20, 5);    // 16 MB in a second file
  add("last", "a.bin", 300, 0);
  for (const auto& [f, bytes] : files) write_bytes(d / f, bytes);
  write_bytes(d / "m.onnx", m.SerializeAsString());

  // Offsets: w 3, big 20, tiny 25165846, mid 5 (b.bin), last 25165850.
  const std::set<std::string> in_place = {"big"};  // the only offset that is a multiple of 4
  for (bool map : {false, true}) {
    LoadOptions opts;
    opts.map_external_data = map;
    auto model = load_model((d / "m.onnx").string(), opts);
    for (const auto& [name, v] : want) {
      const Tensor& t = model->graph->initializers.at(name);
      ASSERT_EQ(t.numel(), static_cast<int64_t>(v.size())) << name;
      EXPECT_EQ(std::memcmp(t.raw(), v.data(), v.size() * 4), 0) << name;
      const bool mapped = map && in_place.count(name);
      EXPECT_EQ(t.storage()->owned(), !mapped) << name << (map ? " mapped" : " copied");
      if (!mapped) {
        EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw()) % 64, 0u) << name << " is not 64-byte aligned";
      }
    }
  }
  Session s((d / "m.onnx").string());
  auto out = s.run({{"x", Tensor::from_vector<float>({4}, {1, 1, 1, 1})}});
  onyx::test::expect_near(out.at("y"), {2, 2.5, 3, 3.5});
}

// Tensors left in the mapping are the file's bytes with copy-on-write: writing one changes the
// model, never the file; the mapping outlives the loader, the file's name (a re-export writes a
// new file under the same name: the mapping keeps the old one), and the model itself while a
// session reads it. An int64 tensor at an offset that is not a multiple of 8 is copied.
TEST(ExternalData, TensorsInTheMappingAreCopyOnWrite) {
  fs::path d = temp_dir("ext_cow");
  onnx::ModelProto m = external_model("w.bin");  // y = x + w, w float [4] at offset 0
  auto* len = m.mutable_graph()->mutable_initializer(0)->add_external_data();
  len->set_key("length");
  len->set_value("16");
  std::string file;
  const std::vector<float> w = {1, 2, 3, 4};
  file.append(reinterpret_cast<const char*>(w.data()), 16);
  const std::vector<int64_t> idx = {2, 0};
  file.append(4, '\0');  // offset 20: 4-byte but not 8-byte aligned
  file.append(reinterpret_cast<const char*>(idx.data()), 16);
  auto* i = m.mutable_graph()->add_initializer();
  i->set_name("idx");
  i->set_data_type(7);
  i->add_dims(2);
  i->set_data_location(onnx::TensorProto::EXTERNAL);
  for (auto [k, v] : {std::pair<std::string, std::string>{"location", "w.bin"}, {"offset", "20"}, {"length", "16"}}) {
    auto* kv = i->add_external_data();
    kv->set_key(k);
    kv->set_value(v);
  }
  write_bytes(d / "w.bin", file);
  write_bytes(d / "m.onnx", m.SerializeAsString());

  auto model = load_model((d / "m.onnx").string());
  Tensor& wt = model->graph->initializers.at("w");
  const Tensor& it = model->graph->initializers.at("idx");
  EXPECT_FALSE(wt.storage()->owned());  // in the mapping
  EXPECT_TRUE(it.storage()->owned());   // copied: misaligned for int64
  EXPECT_EQ(it.data<int64_t>()[0], 2);
  EXPECT_EQ(it.data<int64_t>()[1], 0);
  wt.data<float>()[0] = 10;  // copy-on-write: the file keeps its bytes
  std::ifstream f(d / "w.bin", std::ios::binary);
  std::string after((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  EXPECT_EQ(after, file);
  // The name goes away (as when the file is written anew); the mapping still holds the bytes.
  fs::remove(d / "w.bin");
  write_bytes(d / "w.bin", std::string(4, '\0'));
  Session s(std::move(model));
  auto out = s.run({{"x", Tensor::from_vector<float>({4}, {1, 1, 1, 1})}});
  onyx::test::expect_near(out.at("y"), {11, 3, 4, 5});
}

// A session whose constants live in a mapped file checks the file before each run: truncated
// (a read past its new end would be SIGBUS) or written in place (the same size, new weights:
// pages not yet read would mix them with the old) is an onyx::Error that says what to do, and
// the session keeps working once the file is back. A file replaced by a new one under its name
// is no change: the mapping holds the old one.
TEST(ExternalData, SessionRefusesToRunOnAFileChangedUnderItsMapping) {
  fs::path d = temp_dir("ext_changed");
  write_weights(d / "weights.bin");
  write_bytes(d / "m.onnx", external_model("weights.bin").SerializeAsString());
  Session s((d / "m.onnx").string());
  const NamedTensors feed = {{"x", Tensor::from_vector<float>({4}, {1, 1, 1, 1})}};
  onyx::test::expect_near(s.run(feed).at("y"), {2, 3, 4, 5});
  auto expect_refused = [&](const std::string& how) {
    try {
      s.run(feed);
      ADD_FAILURE() << "ran on a " << how << " file";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("was " + how), std::string::npos) << msg;
      EXPECT_NE(msg.find("weights.bin"), std::string::npos) << msg;
      EXPECT_NE(msg.find("map_external_data"), std::string::npos) << msg;
    }
  };
  // Truncated in place (open with O_TRUNC, as torch.onnx.export's writer does), then written
  // with other bytes of the same size.
  { std::ofstream f(d / "weights.bin", std::ios::binary | std::ios::trunc); }
  expect_refused("truncated");
  float other[4] = {10, 20, 30, 40};
  write_bytes(d / "weights.bin", std::string(reinterpret_cast<char*>(other), sizeof other));
  expect_refused("written");
  // A new file under the name: the session's mapping still holds the old inode (unchanged).
  Session s2((d / "m.onnx").string());
  onyx::test::expect_near(s2.run(feed).at("y"), {11, 21, 31, 41});
  fs::remove(d / "weights.bin");
  write_weights(d / "weights.bin");
  onyx::test::expect_near(s2.run(feed).at("y"), {11, 21, 31, 41});
  // Copied weights do not depend on the file.
  LoadOptions copy;
  copy.map_external_data = false;
  Session s3(load_model((d / "m.onnx").string(), copy));
  { std::ofstream f(d / "weights.bin", std::ios::binary | std::ios::trunc); }
  onyx::test::expect_near(s3.run(feed).at("y"), {2, 3, 4, 5});
}

TEST(ExternalData, MissingFile) {
  fs::path d = temp_dir("ext_missing");
  write_bytes(d / "m.onnx", external_model("nowhere.bin").SerializeAsString());
  try {
    load_model((d / "m.onnx").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not found"), std::string::npos) << e.what();
  }
}

TEST(ExternalData, RefusesLocationsOutsideModelFolder) {
  fs::path root = temp_dir("ext_escape");
  fs::create_directories(root / "model");
  write_weights(root / "secret.bin");
  for (const std::string& loc : std::vector<std::string>{"../secret.bin", (root / "secret.bin").string()}) {
    write_bytes(root / "model" / "m.onnx", external_model(loc).SerializeAsString());
    try {
      load_model((root / "model" / "m.onnx").string());
      FAIL() << loc;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("external data"), std::string::npos) << e.what();
    }
  }
  // A link inside the folder pointing outside is refused too.
  fs::create_symlink(root / "secret.bin", root / "model" / "link.bin");
  write_bytes(root / "model" / "m.onnx", external_model("link.bin").SerializeAsString());
  try {
    load_model((root / "model" / "m.onnx").string());
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("outside the model's folder"), std::string::npos) << e.what();
  }
}

// Declared sizes are checked against the bytes present before anything is allocated: these
// used to ask for terabytes (4 TB, 1 PB) and end in "out of memory".
TEST(ExternalData, DeclaredSizeIsCheckedBeforeAllocating) {
  fs::path d = temp_dir("ext_huge");
  write_weights(d / "weights.bin");  // 16 bytes
  auto load_expecting = [&](onnx::ModelProto m, std::vector<std::string> parts) {
    write_bytes(d / "m.onnx", m.SerializeAsString());
    try {
      load_model((d / "m.onnx").string());
      ADD_FAILURE() << "no error for " << parts[0];
    } catch (const Error& e) {
      for (const auto& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  auto with_dims = [](onnx::ModelProto m, std::vector<int64_t> dims) {
    auto* w = m.mutable_graph()->mutable_initializer(0);
    w->clear_dims();
    for (int64_t x : dims) w->add_dims(x);
    return m;
  };
  // 10^12 floats with no data at all.
  onnx::ModelProto none = with_dims(external_model("weights.bin"), {1000000, 1000000});
  none.mutable_graph()->mutable_initializer(0)->clear_external_data();
  none.mutable_graph()->mutable_initializer(0)->clear_data_location();
  load_expecting(none, {"initializer 'w'", "holds 0 values", "[1000000, 1000000]", "4000000000000 bytes"});
  // The same over 16 bytes of raw data.
  onnx::ModelProto raw = none;
  raw.mutable_graph()->mutable_initializer(0)->set_raw_data(std::string(16, '\0'));
  load_expecting(raw, {"initializer 'w'", "raw data has 16 bytes", "[1000000, 1000000]", "4000000000000 bytes"});
  // External data declaring a 10^15-byte length over the 16-byte file.
  onnx::ModelProto ext = with_dims(external_model("weights.bin"), {250000000000000});
  auto* len = ext.mutable_graph()->mutable_initializer(0)->add_external_data();
  len->set_key("length");
  len->set_value("1000000000000000");
  load_expecting(ext, {"initializer 'w'", "wants 1000000000000000 bytes", "which has 16 bytes"});
  // No length: the file's 16 bytes against the shape's 10^15.
  load_expecting(with_dims(external_model("weights.bin"), {250000000000000}),
                 {"initializer 'w'", "external data in 'weights.bin' has 16 bytes", "[250000000000000]",
                  "1000000000000000 bytes"});
  // An offset + length that overflows int64 is not taken for a small number.
  onnx::ModelProto wrap = external_model("weights.bin");
  for (auto [k, v] : {std::pair{"offset", "8"}, std::pair{"length", "9223372036854775807"}}) {
    auto* kv = wrap.mutable_graph()->mutable_initializer(0)->add_external_data();
    kv->set_key(k);
    kv->set_value(v);
  }
  load_expecting(wrap, {"initializer 'w'", "from offset 8", "which has 16 bytes"});
  // A shape whose byte count overflows.
  load_expecting(with_dims(none, {int64_t{1} << 40, int64_t{1} << 40}),
                 {"initializer 'w'", "more bytes than memory can address"});
}

// An allocation that cannot be satisfied names its size and shape (256 TiB: beyond any
// x86-64 user address space, so it fails even with overcommit).
TEST(Graph, FailedAllocationNamesShapeAndBytes) {
  try {
    Tensor::empty(DataType::Float, {int64_t{1} << 46});
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of memory allocating 281474976710656 bytes for float [70368744177664]"),
              std::string::npos)
        << e.what();
  }
}

// Found by the model fuzz target: a request within a rounding step of 2^64 bytes (a Tile of
// strings) wrapped around in the allocators' rounding and got a tiny block. Now it fails as
// out of memory, through the heap and through a session's arena.
TEST(Graph, AllocationsNearTheAddressLimitFailInsteadOfWrapping) {
  const int64_t n = static_cast<int64_t>((std::numeric_limits<size_t>::max() - 100) / sizeof(std::string));
  for (const auto& alloc : {std::shared_ptr<Allocator>(), std::shared_ptr<Allocator>(std::make_shared<Arena>())}) {
    try {
      Tensor::empty(DataType::String, {n}, alloc);
      ADD_FAILURE() << "allocated " << n << " strings";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("out of memory allocating"), std::string::npos) << e.what();
    }
  }
  EXPECT_GE(Arena::size_class(std::numeric_limits<size_t>::max() - 10),
            std::numeric_limits<size_t>::max() - 10);
}

// Float tensors read as integers (a float OneHot depth, float indices) saturate, and NaN
// reads as 0, instead of an undefined cast.
TEST(Graph, FloatValuesReadAsIntegersSaturate) {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  Tensor f = Tensor::from_vector<float>({6}, {std::nanf(""), 1e30f, -1e30f, 3.7f, -2.5f,
                                              std::numeric_limits<float>::infinity()});
  EXPECT_EQ(f.to_int64_vector(), (std::vector<int64_t>{0, kMax, kMin, 3, -2, kMax}));
  Tensor h = Tensor::from_vector<float16>({2}, {float16(65504.0f), float16(-1.5f)});
  EXPECT_EQ(h.to_int64_vector(), (std::vector<int64_t>{65504, -1}));
  Tensor d = Tensor::from_vector<double>({2}, {9.3e18, -9.3e18});
  EXPECT_EQ(d.to_int64_vector(), (std::vector<int64_t>{kMax, kMin}));
}

TEST(Functions, LocalFunctionsAreInlined) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.add_opset_import()->set_version(17);
  auto* imp = m.add_opset_import();
  imp->set_domain("custom");
  imp->set_version(1);
  auto* f = m.add_functions();
  f->set_name("AddRelu");
  f->set_domain("custom");
  f->add_input("a");
  f->add_input("b");
  f->add_output("o");
  f->add_opset_import()->set_version(17);
  auto* fn1 = f->add_node();
  fn1->set_op_type("Add");
  fn1->add_input("a");
  fn1->add_input("b");
  fn1->add_output("t");
  auto* fn2 = f->add_node();
  fn2->set_op_type("Relu");
  fn2->add_input("t");
  fn2->add_output("o");
  auto* g = m.mutable_graph();
  for (const char* n : {"x", "y"}) {
    auto* in = g->add_input();
    in->set_name(n);
    in->mutable_type()->mutable_tensor_type()->set_elem_type(1);
  }
  auto* call = g->add_node();
  call->set_op_type("AddRelu");
  call->set_domain("custom");
  call->add_input("x");
  call->add_input("y");
  call->add_output("z");
  g->add_output()->set_name("z");
  std::string bytes = m.SerializeAsString();
  auto model = load_model_from_bytes(bytes.data(), bytes.size());
  ASSERT_EQ(model->graph->num_nodes(), 2u);
  Session s(std::move(model), {});
  auto out = s.run({{"x", Tensor::from_vector<float>({2}, {1, -5})}, {"y", Tensor::from_vector<float>({2}, {1, 1})}});
  onyx::test::expect_near(out.at("z"), {2, 0});
}

TEST(ShapeInference, BroadcastAndMatMulKeepSymbols) {
  ModelBuilder b(17);
  b.input("x", DataType::Float, SymShape{Dim::symbol("batch"), Dim::fixed(4), Dim::fixed(8)});
  b.initializer("w", Tensor::zeros(DataType::Float, {8, 5}));
  b.node("MatMul", {"x", "w"}, {"m"});
  b.node("Relu", {"m"}, {"y"});
  b.output("y");
  auto model = b.build();
  infer_types_and_shapes(*model);
  const Value* y = model->graph->find_value("y");
  ASSERT_TRUE(y->type.shape);
  EXPECT_EQ(sym_shape_str(*y->type.shape), "[batch, 4, 5]");
  EXPECT_EQ(y->type.elem, DataType::Float);
  auto b2 = broadcast_shapes({Dim::symbol("n"), Dim::fixed(1)}, {Dim::fixed(3)});
  ASSERT_TRUE(b2);
  EXPECT_EQ(sym_shape_str(*b2), "[n, 3]");
}
