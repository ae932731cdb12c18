// The plain interface between kernels/cuda/attention.cpp (attributes, shapes, checks, the KV
// cache outputs) and attention.cu (device code) for the ONNX Attention op.
//   launch_flash:    fused attention for head sizes up to 256 (online softmax over key tiles
//                    in shared memory, float accumulation); several blocks share a row's keys
//                    when there are too few blocks to fill the device.
//   launch_scores:   the qk_matmul_output values of one mode, or the attention probabilities
//                    (mode 3) for the unfused path;   launch_pv: y = probabilities @ V.
//   launch_concat:   present = concat(past, new) along the sequence axis.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace onyx::cuda::attn {

enum class DType : int { F32, F16, BF16 };
enum class MaskType : int { None, Bool, F32, F64, F16, BF16 };
/// Rounding of the scores before the softmax (softmax_precision float16 / bfloat16).
enum class Round : int { None, F16, BF16 };

/// Rows of one head in a tensor: element strides of batch, head and sequence position;
/// channels are contiguous.
struct View {
  const void* p = nullptr;
  int64_t batch = 0, head = 0, row = 0;
};

struct Params {
  int64_t B = 0, Hq = 0, Hk = 0, Sq = 0, Skv = 0, P = 0, Dq = 0, Dv = 0;
  View q, k, v;  // k, v: Skv rows per (batch, kv head)
  void* y = nullptr;
  int64_t y_batch = 0, y_head = 0, y_row = 0;
  // Additive bias: attn_mask broadcast over [B, Hq, Sq, mask_len] (stride 0 on broadcast
  // axes); keys at or past mask_len are masked.
  const void* mask = nullptr;
  MaskType mask_t = MaskType::None;
  int64_t mask_st[4] = {0, 0, 0, 0};
  int64_t mask_len = 0;
  // Causal / sliding window relative to offset = nonpad[b] - Sq (nonpad given, no past) or P;
  // keys at or past nonpad[b] are masked.
  const int64_t* nonpad = nullptr;  // device [B] or null
  bool causal = false;
  int64_t left = -1, right = -1;  // window sizes, -1: unbounded
  float q_scale = 1.f;  // sqrt(scale), rounded to the input dtype; applied to Q and to K
  float softcap = 0.f;  // rounded to the input dtype; 0: off
  Round sm_round = Round::None;
};

/// Head sizes the fused kernel takes on this device (its shared memory need fits).
bool flash_supported(DType t, int64_t Dq, int64_t Dv);
/// Device scratch launch_flash needs (the partial results of split key ranges).
size_t flash_scratch_bytes(DType t, const Params& p);
void launch_flash(DType t, const Params& p, void* scratch, cudaStream_t stream);

/// out [B, Hq, Sq, Skv] (dtype t): mode 0/1 the scaled scores after softcap, 2 with the mask
/// added, 3 the softmax (rows masked everywhere give zeros), as kernels/cpu/attention.cpp.
/// Needs Dq * 4 bytes of shared memory per block (Dq <= 12288).
void launch_scores(DType t, const Params& p, int mode, void* out, cudaStream_t stream);
/// y = probs @ V, probs [B, Hq, Sq, Skv] of dtype t.
void launch_pv(DType t, const Params& p, const void* probs, cudaStream_t stream);

/// present [B, H, P + S, D] = concat(past [B, H, P, D] (contiguous; null when P = 0), cur
/// (S rows per head, view strides)) for elements of elem_bytes (2 or 4) bytes.
void launch_concat(const void* past, const View& cur, void* present, int elem_bytes, int64_t B, int64_t H,
                   int64_t P, int64_t S, int64_t D, cudaStream_t stream);

}  // namespace onyx::cuda::attn
