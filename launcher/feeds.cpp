#include "launcher/feeds.h"

#include <filesystem>
#include <random>

#include "graph/float8.h"
#include "graph/dispatch.h"
#include "launcher/npy.h"

namespace onyx::cli {
namespace {

/// The input's type with one optional(...) layer peeled off: a tensor or a sequence type.
const ValueType& unwrap_optional(const IoInfo& input) {
  const ValueType* t = &input.type;
  if (t->kind == ValueType::Kind::Optional && t->inner) t = t->inner.get();
  return *t;
}

/// The tensor type behind an input (a tensor, or an optional tensor); onyx::Error otherwise.
const ValueType& tensor_type(const IoInfo& input) {
  const ValueType& t = unwrap_optional(input);
  ONYX_CHECK(t.is_tensor(),
             "[onyx] input '{}' is a {}; --random makes tensors only, pass it with --input {}=DIR "
             "(a folder of 0.npy, 1.npy, ...)",
             input.name, input.type.str(), input.name);
  return t;
}

/// A sequence input from a folder of 0.npy, 1.npy, ... (consecutive; an empty folder is an
/// empty sequence), each read as the sequence's declared element dtype.
Datum load_sequence(const IoInfo& input, const std::filesystem::path& dir) {
  const ValueType& seq = unwrap_optional(input);
  ONYX_CHECK(seq.kind == ValueType::Kind::Sequence,
             "[onyx] --input {}={}: a folder feeds a sequence, but input '{}' is a {}", input.name,
             dir.string(), input.name, input.type.str());
  ONYX_CHECK(seq.inner && seq.inner->is_tensor(),
             "[onyx] input '{}' is a {}; the command line feeds sequences of tensors only",
             input.name, input.type.str());
  const DataType elem = seq.inner->elem;
  size_t npy_files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".npy") ++npy_files;
  std::vector<Tensor> items;
  for (size_t i = 0; i < npy_files; ++i) {
    std::filesystem::path f = dir / fmt::format("{}.npy", i);
    ONYX_CHECK(std::filesystem::exists(f),
               "[onyx] --input {}={}: a sequence folder holds 0.npy, 1.npy, ... without gaps; "
               "found {} .npy files but no {}",
               input.name, dir.string(), npy_files, f.filename().string());
    items.push_back(npy::load_as(f.string(), elem, fmt::format("{}[{}]", input.name, i)));
  }
  return Datum::of_sequence(std::move(items), elem);
}

/// One --input value: a folder is a sequence, anything else a .npy tensor.
Datum load_input(const IoInfo& input, const std::string& path) {
  if (std::filesystem::is_directory(path)) return load_sequence(input, path);
  const ValueType& t = unwrap_optional(input);
  ONYX_CHECK(t.is_tensor(),
             "[onyx] --input {}={}: input '{}' is a {}; pass a folder of 0.npy, 1.npy, ...",
             input.name, path, input.name, input.type.str());
  return npy::load_as(path, t.elem, input.name);
}

}  // namespace

std::pair<std::string, std::string> split_assignment(const std::string& spec,
                                                     const std::string& what) {
  size_t eq = spec.find('=');
  ONYX_CHECK(eq != std::string::npos && eq > 0 && eq + 1 < spec.size(),
             "[onyx] {} expects NAME=VALUE, got '{}'", what, spec);
  return {spec.substr(0, eq), spec.substr(eq + 1)};
}

std::map<std::string, int64_t> parse_dims(const std::vector<std::string>& specs) {
  std::map<std::string, int64_t> dims;
  for (const auto& spec : specs) {
    auto [name, value] = split_assignment(spec, "--dim");
    size_t used = 0;
    int64_t v = -1;
    try {
      v = std::stoll(value, &used);
    } catch (const std::exception&) {
    }
    ONYX_CHECK(used == value.size() && v >= 0, "[onyx] --dim {}: '{}' is not a size", name, value);
    dims[name] = v;
  }
  return dims;
}

Shape concrete_shape(const IoInfo& input, const std::map<std::string, int64_t>& dims,
                     int64_t batch) {
  const ValueType& t = tensor_type(input);
  ONYX_CHECK(t.shape.has_value(),
             "[onyx] input '{}' has no declared shape; pass it with --input {}=FILE.npy",
             input.name, input.name);
  Shape shape;
  bool batch_used = false;
  for (const Dim& d : *t.shape) {
    if (d.is_fixed()) {
      shape.push_back(d.value);
    } else if (auto it = dims.find(d.param); !d.param.empty() && it != dims.end()) {
      shape.push_back(it->second);
    } else {
      shape.push_back(batch > 0 && !batch_used ? batch : 1);
    }
    if (!d.is_fixed()) batch_used = true;
  }
  return shape;
}

Tensor random_tensor(DataType dtype, const Shape& shape, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> real(-1.0f, 1.0f);
  std::uniform_int_distribution<int> small(0, 3);
  Tensor t = Tensor::empty(dtype, shape);
  const int64_t n = t.numel();
  if (dtype == DataType::String) {
    std::uniform_int_distribution<int> letter('a', 'z'), len(1, 5);
    for (int64_t i = 0; i < n; ++i) {
      std::string s(static_cast<size_t>(len(rng)), ' ');
      for (char& c : s) c = static_cast<char>(letter(rng));
      t.data<std::string>()[i] = std::move(s);
    }
  } else if (is_float8(dtype)) {
    for (int64_t i = 0; i < n; ++i) t.data_as<uint8_t>()[i] = float_to_float8(real(rng), dtype);
  } else if (is_sub_byte(dtype)) {  // int4/int2/uint4/uint2: [0, 3] fits all of them
    for (int64_t i = 0; i < n; ++i) t.data_as<uint8_t>()[i] = static_cast<uint8_t>(small(rng));
  } else if (dtype == DataType::Complex64 || dtype == DataType::Complex128) {
    for (int64_t i = 0; i < 2 * n; ++i) {
      if (dtype == DataType::Complex64)
        t.data_as<float>()[i] = real(rng);
      else
        t.data_as<double>()[i] = real(rng);
    }
  } else {
    dispatch<NumericBoolTypes>(dtype, "random input", [&]<typename T>() {
      T* out = t.data<T>();
      for (int64_t i = 0; i < n; ++i) {
        if constexpr (std::is_same_v<T, bool>)
          out[i] = small(rng) & 1;
        else if constexpr (std::is_integral_v<T>)
          out[i] = static_cast<T>(small(rng));
        else
          out[i] = static_cast<T>(real(rng));
      }
    });
  }
  return t;
}

NamedValues make_feeds(const Session& session, const std::vector<std::string>& files, bool random,
                       const std::map<std::string, int64_t>& dims, int64_t batch, uint64_t seed) {
  const auto& inputs = session.inputs();
  NamedValues feeds;
  for (const auto& spec : files) {
    std::string name, path;
    if (spec.find('=') == std::string::npos && inputs.size() == 1) {
      name = inputs[0].name, path = spec;
    } else {
      std::tie(name, path) = split_assignment(spec, "--input");
    }
    auto it = std::find_if(inputs.begin(), inputs.end(),
                           [&](const IoInfo& io) { return io.name == name; });
    if (it == inputs.end()) {
      std::vector<std::string> names;
      for (const auto& io : inputs) names.push_back("'" + io.name + "'");
      ONYX_THROW("[onyx] --input {}: the model has no input '{}' (its inputs: {})", spec, name,
                 names.empty() ? "none" : fmt::format("{}", fmt::join(names, ", ")));
    }
    ONYX_CHECK(!feeds.count(name), "[onyx] input '{}' given twice", name);
    feeds[name] = load_input(*it, path);
  }
  uint64_t k = 0;
  for (const auto& io : inputs) {
    ++k;
    if (feeds.count(io.name)) continue;
    // An optional input that is not given is absent (an empty optional), as in the session API;
    // --random fills optional tensors only.
    if (io.type.kind == ValueType::Kind::Optional && (!random || !unwrap_optional(io).is_tensor()))
      continue;
    ONYX_CHECK(random, "[onyx] missing input '{}' ({}): pass --input {}=FILE.npy or --random",
               io.name, io.type.str(), io.name);
    feeds[io.name] =
        random_tensor(tensor_type(io).elem, concrete_shape(io, dims, batch), seed * 1000003 + k);
  }
  return feeds;
}

}  // namespace onyx::cli
