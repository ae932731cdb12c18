// Scaled dot-product attention as exporters spell it, recognised so that training can
// differentiate it as one unit (autodiff/attention_spelling.cpp), whose backward execution then
// runs as one kernel (inference/fusions_attention_grad.cpp):
//
//   O = MatMul(Softmax(S' [+ M], axis = last), V)
//   S' = S / c, S * c (either order) or S;  S = MatMul(Q [* c1], Kt [* c2])
//
// Hand-written BERTs (Hugging Face's eager attention) divide the scores by sqrt(d); torch.onnx's
// scaled_dot_product_attention multiplies Q and K^T each by sqrt(scale) before the product and
// adds its mask (causal, padding) to the scores. The scales are scalar values (constant or
// computed from shapes, as torch writes them), the mask any additive tensor. Q, Kt, V and the
// probabilities have one known rank >= 2 (their batch dims may broadcast, as MatMul's do);
// every value between Q/Kt/V and O is read only inside the spelling. Hugging Face's eager GPT-2
// also fills masked scores with a Where before the additive mask:
//
//   S'' = Where(cond, S', fill) or Where(cond, fill, S');  Softmax(S'' [+ M])
//
// with `fill` a one-element value (-inf, the dtype's lowest) and `cond` any boolean. Dropout on
// the probabilities breaks the spelling: its nodes are then differentiated one by one.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "graph/ir.h"

namespace onyx {

struct AttentionSpelling {
  Value* q = nullptr;     // [..., Sq, D], before its scale
  Value* kt = nullptr;    // [..., D, Skv]: the keys transposed, before their scale
  Value* v = nullptr;     // [..., Skv, Dv]
  Value* p = nullptr;     // [..., Sq, Skv]: Softmax's output
  Value* mask = nullptr;  // added to the scaled scores, or nullptr
  // Where(where_cond, S', fill) (scores_where_true) or Where(where_cond, fill, S'), or none.
  Value* where_cond = nullptr;
  Value* where_fill = nullptr;
  bool scores_where_true = true;
  struct Factor {
    Value* value;  // a one-element tensor of the scores' type
    bool divides;  // S / c rather than S * c
  };
  std::vector<Factor> factors;  // c1, c2, c: the scores' scalar factors
  Node* last = nullptr;         // MatMul(P, V)
  std::vector<Node*> nodes;     // every node of the spelling, `last` included
};

/// The attention spelling that ends at `last` (the MatMul by V), or nullopt. `opset` is the
/// model's ai.onnx opset (Softmax's default axis changed at 13).
std::optional<AttentionSpelling> match_attention(const Graph& g, Node* last, int64_t opset);

}  // namespace onyx
