// cuBLASLt, opened on first use: the few entry points the CUDA kernels call, defined here with
// cuBLASLt's own signatures (its header declares them; a mismatch does not compile), each
// forwarding to the library that dlopen finds on first call.
//
// Why not link it: libcublasLt.so is a 540 MB library whose load-time relocations touch ~25,000
// pages, so linking it cost every onyx process ~0.1 s and 210 MB of resident memory before main()
// (an empty program linked against it alone: 0.11 s, 211 MB), CPU-only runs and `onyx --help`
// included. cuDNN and the CUDA runtime load their heavy parts lazily on their own (3 MB).
// Without the library (a machine with the driver but not cuBLAS), every entry point returns
// CUBLAS_STATUS_NOT_INITIALIZED and cublasLtGetStatusString says what dlopen said.
#include <cublasLt.h>
#include <dlfcn.h>

#include <string>

namespace {

struct Library {
  void* handle = nullptr;
  std::string error;  // why dlopen failed
};

const Library& library() {
  static const Library lib = [] {
    Library l;
    // RTLD_LOCAL: its symbols stay out of the global namespace, where these shims are.
    l.handle = ::dlopen(ONYX_CUBLASLT_SONAME, RTLD_NOW | RTLD_LOCAL);
    if (!l.handle) {
      const char* e = ::dlerror();
      l.error = std::string(ONYX_CUBLASLT_SONAME " could not be loaded: ") +
                (e ? e : "unknown error") + " (install cuBLAS, or run on the CPU provider)";
    }
    return l;
  }();
  return lib;
}

/// The library's `name`, or null when the library or the symbol is missing.
template <typename F>
F* resolve(const char* name) {
  const Library& l = library();
  return l.handle ? reinterpret_cast<F*>(::dlsym(l.handle, name)) : nullptr;
}

}  // namespace

// Each shim resolves its symbol once (a function-local static: thread-safe initialisation).
#define ONYX_CUBLASLT_FORWARD(name, ...)                          \
  static auto* const real = resolve<decltype(name)>(#name);       \
  if (!real) return CUBLAS_STATUS_NOT_INITIALIZED;                \
  return real(__VA_ARGS__)

extern "C" {

cublasStatus_t CUBLASWINAPI cublasLtCreate(cublasLtHandle_t* lightHandle) {
  ONYX_CUBLASLT_FORWARD(cublasLtCreate, lightHandle);
}

const char* CUBLASWINAPI cublasLtGetStatusString(cublasStatus_t status) {
  static auto* const real = resolve<decltype(cublasLtGetStatusString)>("cublasLtGetStatusString");
  if (!real) return library().handle ? "cublasLtGetStatusString is missing from cuBLASLt"
                                     : library().error.c_str();
  return real(status);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmul(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
    const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
    const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
    cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
    size_t workspaceSizeInBytes, cudaStream_t stream) {
  ONYX_CUBLASLT_FORWARD(cublasLtMatmul, lightHandle, computeDesc, alpha, A, Adesc, B, Bdesc, beta,
                        C, Cdesc, D, Ddesc, algo, workspace, workspaceSizeInBytes, stream);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
    cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc, cublasLtMatrixLayout_t Cdesc,
    cublasLtMatrixLayout_t Ddesc, cublasLtMatmulPreference_t preference,
    int requestedAlgoCount, cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
    int* returnAlgoCount) {
  ONYX_CUBLASLT_FORWARD(cublasLtMatmulAlgoGetHeuristic, lightHandle, operationDesc, Adesc, Bdesc,
                        Cdesc, Ddesc, preference, requestedAlgoCount, heuristicResultsArray,
                        returnAlgoCount);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescInit_internal(cublasLtMatmulDesc_t matmulDesc,
                                                            size_t size,
                                                            cublasComputeType_t computeType,
                                                            cudaDataType_t scaleType) {
  ONYX_CUBLASLT_FORWARD(cublasLtMatmulDescInit_internal, matmulDesc, size, computeType, scaleType);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc,
                                                           cublasLtMatmulDescAttributes_t attr,
                                                           const void* buf, size_t sizeInBytes) {
  ONYX_CUBLASLT_FORWARD(cublasLtMatmulDescSetAttribute, matmulDesc, attr, buf, sizeInBytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceInit_internal(cublasLtMatmulPreference_t pref,
                                                                  size_t size) {
  ONYX_CUBLASLT_FORWARD(cublasLtMatmulPreferenceInit_internal, pref, size);
}

cublasStatus_t CUBLASWINAPI cublasLtMatmulPreferenceSetAttribute(
    cublasLtMatmulPreference_t pref, cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
    size_t sizeInBytes) {
  ONYX_CUBLASLT_FORWARD(cublasLtMatmulPreferenceSetAttribute, pref, attr, buf, sizeInBytes);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutInit_internal(cublasLtMatrixLayout_t matLayout,
                                                              size_t size, cudaDataType type,
                                                              uint64_t rows, uint64_t cols,
                                                              int64_t ld) {
  ONYX_CUBLASLT_FORWARD(cublasLtMatrixLayoutInit_internal, matLayout, size, type, rows, cols, ld);
}

cublasStatus_t CUBLASWINAPI cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t matLayout,
                                                             cublasLtMatrixLayoutAttribute_t attr,
                                                             const void* buf, size_t sizeInBytes) {
  ONYX_CUBLASLT_FORWARD(cublasLtMatrixLayoutSetAttribute, matLayout, attr, buf, sizeInBytes);
}

}  // extern "C"
