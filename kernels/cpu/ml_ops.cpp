// ai.onnx.ml ops beyond LabelEncoder (string_ops.cpp): ArrayFeatureExtractor, Binarizer,
// TreeEnsemble.
#include <cmath>
#include <limits>
#include <unordered_set>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/move_util.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

// Gathers columns of the last axis; a 1-D input is treated as one row (as onnxruntime does).
void array_feature_extractor(KernelContext& ctx) {
  const Tensor& x = ctx.required_input(0);
  const Tensor& idx = ctx.required_input(1);
  ONYX_CHECK(idx.dtype() == DataType::Int64, "[{}] indices must be int64, got {}", ctx.label(),
             dtype_name(idx.dtype()));
  ONYX_CHECK(x.rank() >= 1, "[{}] input must have rank >= 1, got a scalar", ctx.label());
  std::vector<int64_t> cols = idx.to_int64_vector();
  int64_t width = x.shape().back(), rows = x.numel() / std::max<int64_t>(width, 1);
  for (int64_t c : cols)
    ONYX_CHECK(c >= 0 && c < width, "[{}] index {} is out of range for {} columns", ctx.label(), c,
               width);
  Shape out = x.rank() == 1 ? Shape{1, 0} : x.shape();
  out.back() = static_cast<int64_t>(cols.size());
  Tensor& y = ctx.allocate_output(0, x.dtype(), out);
  dispatch_move(x.dtype(), ctx.label(), [&]<typename T>() {
    const T* px = x.data_as<T>();
    T* py = y.data_as<T>();
    for (int64_t r = 0; r < rows; ++r)
      for (size_t c = 0; c < cols.size(); ++c) py[r * cols.size() + c] = px[r * width + cols[c]];
  });
}

class BinarizerKernel final : public Kernel {
 public:
  explicit BinarizerKernel(const KernelInfo& info)
      : threshold_(info.node.attr_float("threshold", 0.0f)) {}
  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    Tensor& y = ctx.allocate_output(0, x.dtype(), x.shape());
    dispatch<TypeList<float, double, int32_t, int64_t>>(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* px = x.data<T>();
      T* py = y.data<T>();
      auto th = static_cast<double>(threshold_);
      for (int64_t i = 0; i < x.numel(); ++i) py[i] = static_cast<double>(px[i]) > th ? T(1) : T(0);
    });
  }

 private:
  float threshold_;
};

// TreeEnsemble (ai.onnx.ml 5): nodes in flat arrays; each branch points at a node or a leaf.
class TreeEnsembleKernel final : public Kernel {
 public:
  enum Mode : uint8_t { LEQ, LT, GTE, GT, EQ, NEQ, MEMBER };

  explicit TreeEnsembleKernel(const KernelInfo& info) {
    const Node& n = info.node;
    auto tensor = [&](const char* name) { return n.require_attr(name, Attribute::Type::Tensor).t; };
    splits_ = tensor("nodes_splits").to_double_vector();
    std::vector<int64_t> modes = tensor("nodes_modes").to_int64_vector();
    features_ = n.attr_ints("nodes_featureids");
    true_ids_ = n.attr_ints("nodes_truenodeids");
    false_ids_ = n.attr_ints("nodes_falsenodeids");
    true_leaf_ = n.attr_ints("nodes_trueleafs");
    false_leaf_ = n.attr_ints("nodes_falseleafs");
    missing_true_ = n.attr_ints("nodes_missing_value_tracks_true");
    targets_ = n.attr_ints("leaf_targetids");
    weights_ = tensor("leaf_weights").to_double_vector();
    roots_ = n.attr_ints("tree_roots");
    n_targets_ = n.require_attr("n_targets", Attribute::Type::Int).i;
    aggregate_ = n.attr_int("aggregate_function", 1);
    int64_t post = n.attr_int("post_transform", 0);
    if (post != 0)
      throw NotImplemented(fmt::format("[{}] post_transform {} is not supported", n.label(), post));
    ONYX_CHECK(aggregate_ >= 0 && aggregate_ <= 3, "[{}] aggregate_function must be 0..3, got {}",
               n.label(), aggregate_);
    size_t nn = splits_.size();
    bool ok = modes.size() == nn && features_.size() == nn && true_ids_.size() == nn &&
              false_ids_.size() == nn && true_leaf_.size() == nn && false_leaf_.size() == nn &&
              (missing_true_.empty() || missing_true_.size() == nn) &&
              targets_.size() == weights_.size();
    ONYX_CHECK(ok, "[{}] nodes_* and leaf_* attributes must have matching lengths", n.label());
    for (size_t i = 0; i < nn; ++i)
      for (auto [id, leaf] :
           {std::pair{true_ids_[i], true_leaf_[i]}, std::pair{false_ids_[i], false_leaf_[i]}})
        ONYX_CHECK(id >= 0 && static_cast<size_t>(id) < (leaf ? weights_.size() : nn),
                   "[{}] node {} points at {} {}, which does not exist", n.label(), i,
                   leaf ? "leaf" : "node", id);
    for (int64_t root : roots_)
      ONYX_CHECK(root >= 0 && static_cast<size_t>(root) < nn, "[{}] tree root {} is not a node",
                 n.label(), root);
    for (int64_t t : targets_)
      ONYX_CHECK(t >= 0 && t < n_targets_, "[{}] leaf target {} is out of range for n_targets {}",
                 n.label(), t, n_targets_);
    // Set members: one NaN-terminated run per MEMBER node, in node order.
    std::vector<double> members;
    if (const Attribute* a = n.attr("membership_values")) members = a->t.to_double_vector();
    size_t at = 0;
    sets_.resize(nn);
    modes_.resize(nn);
    for (size_t i = 0; i < nn; ++i) {
      ONYX_CHECK(modes[i] >= 0 && modes[i] <= MEMBER, "[{}] node {} has unknown mode {}", n.label(),
                 i, modes[i]);
      modes_[i] = static_cast<Mode>(modes[i]);
      if (modes_[i] != MEMBER) continue;
      ONYX_CHECK(at < members.size(), "[{}] membership_values has no set for node {}", n.label(),
                 i);
      for (; at < members.size() && !std::isnan(members[at]); ++at) sets_[i].insert(members[at]);
      ++at;
    }
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    ONYX_CHECK(x.rank() == 2, "[{}] X must be [N, F], got {}", ctx.label(), shape_str(x.shape()));
    int64_t rows = x.shape()[0], feats = x.shape()[1];
    for (int64_t f : features_)
      ONYX_CHECK(f >= 0 && f < feats, "[{}] feature id {} is out of range for {} features",
                 ctx.label(), f, feats);
    Tensor& y = ctx.allocate_output(0, x.dtype(), {rows, n_targets_});
    dispatch<FloatTypes>(x.dtype(), ctx.label(), [&]<typename T>() {
      const T* px = x.data<T>();
      T* py = y.data<T>();
      double lowest = static_cast<double>(std::numeric_limits<acc_t<T>>::lowest());
      double init = aggregate_ == 2 ? -lowest : aggregate_ == 3 ? lowest : 0.0;
      parallel_for(rows, ctx.threads(), 16, [&](int64_t b, int64_t e) {
        std::vector<double> acc(static_cast<size_t>(n_targets_));
        std::vector<double> row(static_cast<size_t>(feats));
        for (int64_t r = b; r < e; ++r) {
          for (int64_t f = 0; f < feats; ++f) row[f] = static_cast<double>(px[r * feats + f]);
          std::fill(acc.begin(), acc.end(), init);
          for (int64_t root : roots_) {
            int64_t leaf = find_leaf(root, row);
            double w = weights_[leaf];
            double& a = acc[targets_[leaf]];
            switch (aggregate_) {
              case 0:
                a += w / static_cast<double>(roots_.size());
                break;
              case 1:
                a += w;
                break;
              case 2:
                a = std::min(a, w);
                break;
              default:
                a = std::max(a, w);
                break;
            }
          }
          for (int64_t t = 0; t < n_targets_; ++t) py[r * n_targets_ + t] = static_cast<T>(acc[t]);
        }
      });
    });
  }

 private:
  bool goes_true(size_t i, double v) const {
    if (std::isnan(v) && !missing_true_.empty() && missing_true_[i]) return true;
    double s = splits_[i];
    switch (modes_[i]) {
      case LEQ:
        return v <= s;
      case LT:
        return v < s;
      case GTE:
        return v >= s;
      case GT:
        return v > s;
      case EQ:
        return v == s;
      case NEQ:
        return v != s;
      default:
        return sets_[i].count(v) != 0;
    }
  }

  int64_t find_leaf(int64_t node, const std::vector<double>& row) const {
    // A root whose two branches are the same leaf is that leaf.
    if (true_leaf_[node] && false_leaf_[node] && true_ids_[node] == false_ids_[node])
      return true_ids_[node];
    for (size_t guard = 0; guard <= splits_.size(); ++guard) {
      auto i = static_cast<size_t>(node);
      bool t = goes_true(i, row[features_[i]]);
      node = t ? true_ids_[i] : false_ids_[i];
      if (t ? true_leaf_[i] : false_leaf_[i]) return node;
    }
    ONYX_THROW("[TreeEnsemble] tree at root {} has a cycle", node);
  }

  std::vector<double> splits_, weights_;
  std::vector<Mode> modes_;
  std::vector<std::unordered_set<double>> sets_;
  std::vector<int64_t> features_, true_ids_, false_ids_, true_leaf_, false_leaf_, missing_true_,
      targets_, roots_;
  int64_t n_targets_ = 0, aggregate_ = 1;
};

}  // namespace

void register_ml_kernels(KernelRegistry& r) {
  r.add({.op_type = "ArrayFeatureExtractor",
         .domain = "ai.onnx.ml",
         .since = 1,
         .types = {DataType::Float, DataType::Double, DataType::Int64, DataType::Int32,
                   DataType::String},
         .create = function_factory(array_feature_extractor)});
  r.add({.op_type = "Binarizer",
         .domain = "ai.onnx.ml",
         .since = 1,
         .types = {DataType::Float, DataType::Double, DataType::Int64, DataType::Int32},
         .create = make_factory<BinarizerKernel>()});
  r.add({.op_type = "TreeEnsemble",
         .domain = "ai.onnx.ml",
         .since = 5,
         .types = {DataType::Float, DataType::Double, DataType::Float16},
         .create = make_factory<TreeEnsembleKernel>()});
}

}  // namespace onyx::cpu
