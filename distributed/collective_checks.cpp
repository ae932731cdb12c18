#include "distributed/collective_checks.h"

#include <cstdlib>

#include "graph/error.h"

namespace onyx::dist {

std::string reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
  }
  ONYX_THROW("[communicator] unknown reduce op {}", static_cast<int>(op));
}

void check_tensor(const std::string& backend, const char* collective, const char* what,
                  const Tensor& t, DeviceType device) {
  ONYX_CHECK(t.defined() && (t.raw() != nullptr || t.numel() == 0),
             "[{}] {}: {} should be a tensor with storage but is undefined", backend, collective,
             what);
  switch (t.dtype()) {
    case DataType::Float:
    case DataType::Double:
    case DataType::Float16:
    case DataType::BFloat16:
    case DataType::Int8:
    case DataType::UInt8:
    case DataType::Int32:
    case DataType::Int64:
      break;
    default:
      ONYX_THROW(
          "[{}] {}: {} should be float, double, float16, bfloat16, int8, uint8, int32 or "
          "int64 but is {}",
          backend, collective, what, dtype_name(t.dtype()));
  }
  ONYX_CHECK(t.numel() == 0 || t.device().type == device,
             "[{}] {}: {} should be in {} memory but is on {}", backend, collective, what,
             device == DeviceType::CPU ? "CPU" : "CUDA", t.device().str());
}

void check_allgather(const std::string& backend, const Tensor& in, const Tensor& out, int size) {
  ONYX_CHECK(in.dtype() == out.dtype(),
             "[{}] allgather: output dtype {} should equal input dtype {}", backend,
             dtype_name(out.dtype()), dtype_name(in.dtype()));
  ONYX_CHECK(out.numel() == in.numel() * size,
             "[{}] allgather: output should have size {} x {} = {} elements but has {} ({})",
             backend, size, in.numel(), in.numel() * size, out.numel(), shape_str(out.shape()));
}

void check_reduce_scatter(const std::string& backend, const Tensor& in, const Tensor& out,
                          int size) {
  ONYX_CHECK(in.dtype() == out.dtype(),
             "[{}] reduce_scatter: output dtype {} should equal input dtype {}", backend,
             dtype_name(out.dtype()), dtype_name(in.dtype()));
  ONYX_CHECK(in.numel() == out.numel() * size,
             "[{}] reduce_scatter: input should have size {} x {} = {} elements but has {} ({})",
             backend, size, out.numel(), out.numel() * size, in.numel(), shape_str(in.shape()));
}

void check_root(const std::string& backend, int root, int size) {
  ONYX_CHECK(root >= 0 && root < size, "[{}] broadcast: root should be in [0, {}) but is {}",
             backend, size, root);
}

void check_timeout(const std::string& backend, std::chrono::milliseconds t) {
  ONYX_CHECK(t.count() > 0, "[{}] timeout should be positive but is {} ms", backend, t.count());
}

std::string describe(const Tensor& t) {
  return fmt::format("{} x {}", t.numel(), dtype_name(t.dtype()));
}

namespace {
/// `fallback`, or the positive number of seconds in environment variable `name`.
std::chrono::milliseconds seconds_from_env(const char* name, std::chrono::milliseconds fallback) {
  const char* env = std::getenv(name);
  if (env == nullptr || *env == '\0') return fallback;
  char* end = nullptr;
  double s = std::strtod(env, &end);
  ONYX_CHECK(end != env && *end == '\0' && s > 0,
             "[communicator] {} should be a positive number of seconds but is '{}'", name, env);
  return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
}
}  // namespace

std::chrono::milliseconds default_timeout() {
  return seconds_from_env("ONYX_COMM_TIMEOUT", std::chrono::seconds(60));
}

std::chrono::milliseconds default_peer_timeout() {
  return seconds_from_env("ONYX_PEER_TIMEOUT", std::chrono::seconds(10));
}

bool ring_allreduce_from_env() {
  const char* env = std::getenv("ONYX_MPI_ALLREDUCE");
  if (env == nullptr || *env == '\0') return true;
  const std::string v = env;
  ONYX_CHECK(v == "ring" || v == "mpi",
             "[communicator] ONYX_MPI_ALLREDUCE should be 'ring' or 'mpi' but is '{}'", v);
  return v == "ring";
}

}  // namespace onyx::dist
