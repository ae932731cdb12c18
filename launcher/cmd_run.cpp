// onyx run: one inference, outputs written as .npy and summarised.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <filesystem>
#include <memory>

#include "graph/dispatch.h"
#include "launcher/commands.h"
#include "launcher/feeds.h"
#include "launcher/npy.h"

namespace onyx::cli {
namespace {

struct RunOptions {
  ProviderOptions provider;
  std::string model, output_dir, profile, opt = "all", precision = "fp32";
  std::vector<std::string> inputs, dims;
  bool random = false, no_winograd = false, flush_denormals = false;
  int threads = 0;
  uint64_t seed = 0;
};

/// File (or folder) name stem for an output: '/' (and a leading '.') cannot be part of one.
std::string output_file_name(std::string name) {
  for (char& c : name)
    if (c == '/' || c == '\\') c = '_';
  if (name.empty() || name[0] == '.') name = "_" + name;
  return name;
}

/// "float [2, 3]  0.5 -1 2.25 ..." with up to `n` values at 6 significant digits.
std::string summary(const Tensor& t, size_t n = 6) {
  std::string s = fmt::format("{} {}", dtype_name(t.dtype()), shape_str(t.shape()));
  size_t shown = std::min<size_t>(n, static_cast<size_t>(t.numel()));
  std::vector<std::string> vals;
  if (t.dtype() == DataType::String) {
    for (size_t i = 0; i < shown; ++i)
      vals.push_back(fmt::format("\"{}\"", t.data<std::string>()[i]));
  } else if (!is_float8(t.dtype()) && !is_sub_byte(t.dtype()) && t.dtype() != DataType::Complex64 &&
             t.dtype() != DataType::Complex128) {
    dispatch<NumericBoolTypes>(t.dtype(), "onyx run", [&]<typename T>() {
      for (size_t i = 0; i < shown; ++i)
        vals.push_back(fmt::format("{:.6g}", static_cast<double>(t.data<T>()[i])));
    });
  } else {
    return s;
  }
  if (shown < static_cast<size_t>(t.numel())) vals.push_back("...");
  return fmt::format("{}  {}", s, fmt::join(vals, " "));
}

void print_tensor(const std::string& name, const Tensor& t) {
  fmt::print("  {:<24} {}\n", name, summary(t));
}

int run(const RunOptions& o, const CommonOptions& common) {
  SessionOptions so;
  so.intra_op_threads = o.threads;
  so.opt_level = opt_level_from_name(o.opt);
  so.precision = parse_precision(o.precision);
  so.winograd_convolutions = !o.no_winograd;
  so.flush_denormals = o.flush_denormals;
  apply_provider_options(o.provider, so.providers, so.device_id);
  so.log_level = common.log_level;
  so.profiling = !o.profile.empty();
  if (so.profiling) so.profile_path = o.profile;

  auto t0 = std::chrono::steady_clock::now();
  Session session(o.model, so);
  auto t1 = std::chrono::steady_clock::now();
  NamedValues feeds = make_feeds(session, o.inputs, o.random, parse_dims(o.dims), 0, o.seed);
  for (const auto& [name, v] : feeds) {
    if (v.is_tensor()) spdlog::info("input {}: {}", name, summary(v.tensor));
    if (v.is_sequence()) spdlog::info("input {}: sequence of {} tensors", name, v.sequence.size());
  }

  RunStats stats;
  auto t2 = std::chrono::steady_clock::now();
  NamedValues outputs = session.run_values(feeds, {}, &stats);
  auto t3 = std::chrono::steady_clock::now();
  auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };

  if (!o.output_dir.empty()) std::filesystem::create_directories(o.output_dir);
  // A tensor goes to DIR/<name>.npy, a sequence to the folder DIR/<name>/ as 0.npy, 1.npy, ...
  // (the layout --input reads back), an empty optional writes nothing.
  auto write = [&](const std::filesystem::path& file, const Tensor& t) {
    if (!o.output_dir.empty()) npy::save(t, (std::filesystem::path(o.output_dir) / file).string());
  };
  fmt::print("outputs:\n");
  for (const auto& io : session.outputs()) {
    const Datum& d = outputs.at(io.name);
    if (d.is_tensor()) {
      print_tensor(io.name, d.tensor);
      write(output_file_name(io.name) + ".npy", d.tensor);
    } else if (d.is_sequence()) {
      fmt::print("  {:<24} sequence of {} tensors\n", io.name, d.sequence.size());
      if (!o.output_dir.empty())
        std::filesystem::create_directories(std::filesystem::path(o.output_dir) /
                                            output_file_name(io.name));
      for (size_t i = 0; i < d.sequence.size(); ++i) {
        print_tensor(fmt::format("  [{}]", i), d.sequence[i]);
        write(std::filesystem::path(output_file_name(io.name)) / fmt::format("{}.npy", i),
              d.sequence[i]);
      }
    } else {
      fmt::print("  {:<24} none (empty optional)\n", io.name);
    }
  }
  fmt::print("load {:.2f} ms, run {:.3f} ms ({} nodes, peak {:.1f} KiB intermediate)\n", ms(t0, t1),
             ms(t2, t3), stats.nodes_run, stats.peak_bytes / 1024.0);
  if (!o.output_dir.empty()) fmt::print("outputs written to {}/\n", o.output_dir);
  if (so.profiling) fmt::print("profile written to {}\n", session.end_profiling());
  return 0;
}

}  // namespace

CLI::Option* add_precision_option(CLI::App* app, std::string& precision) {
  return app
      ->add_option("--precision", precision,
                   "fp32, or bf16/fp16: matrix products and convolutions in that format (weights "
                   "converted once), softmax/norms/reductions in float32; inputs and outputs keep "
                   "their types")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
}

CLI::Option* add_winograd_option(CLI::App* app, bool& no_winograd) {
  return app->add_flag("--no-winograd", no_winograd,
                       "Direct convolutions only: no Winograd 3x3 kernels (which are faster on "
                       "AVX-512 CPUs and differ from direct ones within ~1e-5)");
}

CLI::Option* add_flush_denormals_option(CLI::App* app, bool& flush) {
  return app->add_flag("--flush-denormals", flush,
                       "Read and write denormal floats as zero during runs (on Intel CPUs each "
                       "operation on one takes ~100x its time); ONNX Runtime's "
                       "session.set_denormal_as_zero");
}

Command add_run_command(CLI::App& parent, const CommonOptions& common) {
  auto o = std::make_shared<RunOptions>();
  CLI::App* app = parent.add_subcommand("run", "Run a model once and write its outputs");
  app->add_option("model", o->model, "ONNX model file")->required()->check(CLI::ExistingFile);
  app->add_option("-i,--input", o->inputs,
                  "Input from a .npy file, as NAME=FILE.npy, or a sequence from a folder of "
                  "0.npy, 1.npy, ..., as NAME=DIR (repeatable; a bare path for a one-input "
                  "model). Optional inputs not given are empty")
      ->allow_extra_args(false);
  app->add_flag("--random", o->random, "Random values for inputs not given with --input");
  app->add_option("--dim", o->dims, "Size of a symbolic dimension for --random, NAME=VALUE")
      ->allow_extra_args(false);
  app->add_option("--seed", o->seed, "Seed for --random")->capture_default_str();
  app->add_option("-o,--output-dir", o->output_dir, "Write each output to DIR/<name>.npy (a sequence: DIR/<name>/0.npy, 1.npy, ...)");
  app->add_option("-t,--threads", o->threads, "Intra-op threads (0: one per core)")
      ->capture_default_str()
      ->check(CLI::Range(0, 1 << 20));
  app->add_option("--opt", o->opt, "Graph optimization level")
      ->capture_default_str()
      ->check(CLI::IsMember({"none", "basic", "extended", "all"}));
  add_precision_option(app, o->precision);
  add_winograd_option(app, o->no_winograd);
  add_flush_denormals_option(app, o->flush_denormals);
  add_provider_options(app, o->provider);
  app->add_option("--profile", o->profile, "Write a Chrome-trace profile of the run to FILE");
  return {app, [o, &common] { return run(*o, common); }};
}

}  // namespace onyx::cli
