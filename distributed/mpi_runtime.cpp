#include "distributed/mpi_runtime.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <vector>

#include "graph/error.h"

namespace onyx::dist::mpi {
namespace {

struct Runtime {
  std::mutex mu;
  bool initialized = false;
  bool we_initialized = false;
  bool peer_unresponsive = false;
  int local_rank = 0;
  int local_size = 1;
  int next_hook = 0;
  std::map<int, std::function<void()>> hooks;
  std::vector<std::shared_ptr<void>> kept;  // keep_until_exit: never released
  MPI_Op f16_sum = MPI_OP_NULL, f16_max = MPI_OP_NULL;
  MPI_Op bf16_sum = MPI_OP_NULL, bf16_max = MPI_OP_NULL;
};

Runtime& runtime() {
  static Runtime* r = new Runtime;  // never destroyed: used from the atexit handler
  return *r;
}

// MPI_User_function over 16-bit floats: each step in float, rounded back (like NCCL).
template <typename H, bool kMax>
void reduce16(void* in, void* inout, int* len, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    float x = H::from_bits(a[i]), y = H::from_bits(b[i]);
    b[i] = H(kMax ? std::max(x, y) : x + y).bits;
  }
}

void finalize_at_exit() {
  Runtime& r = runtime();
  std::map<int, std::function<void()>> hooks;
  {
    std::lock_guard lk(r.mu);
    hooks.swap(r.hooks);
  }
  for (auto& [id, fn] : hooks) fn();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!r.we_initialized || finalized || r.peer_unresponsive) return;
  for (MPI_Op* op : {&r.f16_sum, &r.f16_max, &r.bf16_sum, &r.bf16_max}) MPI_Op_free(op);
  MPI_Finalize();
}

}  // namespace

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  ONYX_THROW("[mpi] {} failed: {}", call, std::string(msg, len));
}

void ensure_initialized() {
  Runtime& r = runtime();
  std::lock_guard lk(r.mu);
  if (r.initialized) return;
  int already = 0, provided = 0;
  check(MPI_Initialized(&already), "MPI_Initialized");
  if (already) {
    check(MPI_Query_thread(&provided), "MPI_Query_thread");
  } else {
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
    r.we_initialized = true;
    std::atexit(finalize_at_exit);
  }
  ONYX_CHECK(provided >= MPI_THREAD_MULTIPLE,
             "[mpi] the MPI library should provide MPI_THREAD_MULTIPLE (each communicator runs "
             "its own thread) but provides only level {}",
             provided);
  check(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  check(MPI_Op_create(&reduce16<float16, false>, 1, &r.f16_sum), "MPI_Op_create");
  check(MPI_Op_create(&reduce16<float16, true>, 1, &r.f16_max), "MPI_Op_create");
  check(MPI_Op_create(&reduce16<bfloat16, false>, 1, &r.bf16_sum), "MPI_Op_create");
  check(MPI_Op_create(&reduce16<bfloat16, true>, 1, &r.bf16_max), "MPI_Op_create");
  MPI_Comm host;
  check(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &host),
        "MPI_Comm_split_type");
  check(MPI_Comm_rank(host, &r.local_rank), "MPI_Comm_rank");
  check(MPI_Comm_size(host, &r.local_size), "MPI_Comm_size");
  check(MPI_Comm_free(&host), "MPI_Comm_free");
  r.initialized = true;
}

MPI_Datatype datatype(DataType dt) {
  switch (dt) {
    case DataType::Float: return MPI_FLOAT;
    case DataType::Double: return MPI_DOUBLE;
    case DataType::Float16: return MPI_UINT16_T;
    case DataType::BFloat16: return MPI_UINT16_T;
    case DataType::Int8: return MPI_INT8_T;
    case DataType::UInt8: return MPI_UINT8_T;
    case DataType::Int32: return MPI_INT32_T;
    case DataType::Int64: return MPI_INT64_T;
    default: ONYX_THROW("[mpi] no MPI datatype for {}", dtype_name(dt));
  }
}

MPI_Op reduce_op(ReduceOp op, DataType dt) {
  Runtime& r = runtime();
  bool max = op == ReduceOp::Max;
  if (dt == DataType::Float16) return max ? r.f16_max : r.f16_sum;
  if (dt == DataType::BFloat16) return max ? r.bf16_max : r.bf16_sum;
  return max ? MPI_MAX : MPI_SUM;
}

int local_rank() { return runtime().local_rank; }
int local_size() { return runtime().local_size; }

void keep_until_exit(std::shared_ptr<void> state) {
  std::lock_guard lk(runtime().mu);
  runtime().kept.push_back(std::move(state));
}

void mark_peer_unresponsive() {
  std::lock_guard lk(runtime().mu);
  runtime().peer_unresponsive = true;
}

int at_finalize(std::function<void()> fn) {
  Runtime& r = runtime();
  std::lock_guard lk(r.mu);
  r.hooks[r.next_hook] = std::move(fn);
  return r.next_hook++;
}

void cancel_at_finalize(int id) {
  std::lock_guard lk(runtime().mu);
  runtime().hooks.erase(id);
}

}  // namespace onyx::dist::mpi
