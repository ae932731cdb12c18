// TfIdfVectorizer: counts the pool's n-grams (with skips) in each row of an int or string
// input and weights the counts (TF, IDF or TFIDF).
#include <algorithm>
#include <unordered_map>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/parallel.h"

namespace onyx::cpu {
namespace {

/// A trie over token ids; a node that ends a pool n-gram holds that n-gram's output column.
struct NgramTrie {
  struct Node {
    std::unordered_map<int64_t, int32_t> next;
    int64_t column = -1;
  };
  std::vector<Node> nodes{Node{}};

  /// Index of the child of `node` for `token`, or -1.
  int32_t child(int32_t node, int64_t token) const {
    const auto& m = nodes[static_cast<size_t>(node)].next;
    auto it = m.find(token);
    return it == m.end() ? -1 : it->second;
  }
  void insert(const std::vector<int64_t>& gram, int64_t column) {
    int32_t at = 0;
    for (int64_t tok : gram) {
      int32_t c = child(at, tok);
      if (c < 0) {
        c = static_cast<int32_t>(nodes.size());
        nodes[static_cast<size_t>(at)].next.emplace(tok, c);
        nodes.emplace_back();
      }
      at = c;
    }
    nodes[static_cast<size_t>(at)].column = column;
  }
};

enum class Weighting { TF, IDF, TFIDF };

class TfIdfVectorizerKernel final : public Kernel {
 public:
  explicit TfIdfVectorizerKernel(const KernelInfo& info) {
    const Node& n = info.node;
    std::string mode = n.require_attr("mode", Attribute::Type::String).s;
    if (mode == "TF")
      weighting_ = Weighting::TF;
    else if (mode == "IDF")
      weighting_ = Weighting::IDF;
    else if (mode == "TFIDF")
      weighting_ = Weighting::TFIDF;
    else
      ONYX_THROW("[{}] mode should be TF, IDF or TFIDF but is '{}'", info.label(), mode);
    min_gram_ = n.require_attr("min_gram_length", Attribute::Type::Int).i;
    max_gram_ = n.require_attr("max_gram_length", Attribute::Type::Int).i;
    max_skip_ = n.require_attr("max_skip_count", Attribute::Type::Int).i;
    ONYX_CHECK(min_gram_ >= 1 && min_gram_ <= max_gram_ && max_skip_ >= 0,
               "[{}] needs 1 <= min_gram_length <= max_gram_length and max_skip_count >= 0, got "
               "{}, {}, {}",
               info.label(), min_gram_, max_gram_, max_skip_);
    auto counts = n.require_attr("ngram_counts", Attribute::Type::Ints).ints;
    auto indexes = n.require_attr("ngram_indexes", Attribute::Type::Ints).ints;
    weights_ = n.attr_floats("weights");
    strings_ = n.has_attr("pool_strings");
    ONYX_CHECK(strings_ != n.has_attr("pool_int64s"),
               "[{}] needs exactly one of pool_strings and pool_int64s", info.label());
    std::vector<int64_t> pool;
    if (strings_) {
      for (const std::string& s : n.attr_strings("pool_strings"))
        pool.push_back(vocab_.emplace(s, static_cast<int64_t>(vocab_.size())).first->second);
    } else {
      pool = n.attr_ints("pool_int64s");
    }
    for (int64_t c : indexes)
      ONYX_CHECK(c >= 0, "[{}] ngram_indexes must be non-negative, got {}", info.label(), c);
    width_ = indexes.empty() ? 0 : *std::max_element(indexes.begin(), indexes.end()) + 1;
    build_trie(info, pool, counts, indexes);
  }

  void compute(KernelContext& ctx) const override {
    const Tensor& x = ctx.required_input(0);
    bool want_strings = x.dtype() == DataType::String;
    ONYX_CHECK(want_strings == strings_, "[{}] input is {} but the pool holds {}", ctx.label(),
               dtype_name(x.dtype()), strings_ ? "strings" : "integers");
    ONYX_CHECK(x.rank() <= 2 && (x.rank() < 2 || x.shape()[0] > 0),
               "[{}] input should be [C] or [N, C] with N > 0 but is {}", ctx.label(),
               shape_str(x.shape()));
    int64_t rows = x.rank() == 2 ? x.shape()[0] : 1;
    int64_t cols = x.rank() == 0 ? 1 : x.shape().back();
    std::vector<int64_t> tokens = token_ids(x);
    Shape out_shape = x.rank() == 2 ? Shape{rows, width_} : Shape{width_};
    Tensor& y = ctx.allocate_output(0, DataType::Float, out_shape);
    float* out = y.data<float>();
    std::fill_n(out, y.numel(), 0.0f);
    parallel_for(rows, ctx.threads(), 16, [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) count_row(tokens.data() + r * cols, cols, out + r * width_);
    });
    for (int64_t r = 0; r < rows; ++r) weigh_row(out + r * width_);
  }

 private:
  // Token ids of the input: the integers themselves, or vocabulary ids for strings
  // (-1 for a word outside the pool; the trie holds no -1 edge for strings).
  std::vector<int64_t> token_ids(const Tensor& x) const {
    if (!strings_) return x.to_int64_vector();
    std::vector<int64_t> ids(static_cast<size_t>(x.numel()), -1);
    const std::string* s = x.data<std::string>();
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = vocab_.find(s[i]);
      if (it != vocab_.end()) ids[i] = it->second;
    }
    return ids;
  }

  void build_trie(const KernelInfo& info, const std::vector<int64_t>& pool,
                  const std::vector<int64_t>& counts, const std::vector<int64_t>& indexes) {
    auto total = static_cast<int64_t>(pool.size());
    size_t gram_id = 0;
    for (size_t level = 0; level < counts.size(); ++level) {
      int64_t size = static_cast<int64_t>(level) + 1;
      int64_t begin = counts[level];
      int64_t end = level + 1 < counts.size() ? counts[level + 1] : total;
      ONYX_CHECK(begin >= 0 && begin <= end && end <= total,
                 "[{}] ngram_counts {} do not split a pool of {} items", info.label(),
                 fmt::join(counts, ", "), total);
      for (int64_t at = begin; at + size <= end; at += size, ++gram_id) {
        ONYX_CHECK(gram_id < indexes.size(),
                   "[{}] the pool holds more n-grams than the {} "
                   "ngram_indexes",
                   info.label(), indexes.size());
        if (size < min_gram_ || size > max_gram_) continue;
        trie_.insert(std::vector<int64_t>(pool.begin() + at, pool.begin() + at + size),
                     indexes[gram_id]);
      }
    }
  }

  // Counts every pool n-gram starting at each position, for each skip distance; 1-grams are
  // counted once since skips do not change them.
  void count_row(const int64_t* tok, int64_t n, float* out) const {
    int64_t first_size = min_gram_;
    for (int64_t skip = 1; skip - 1 <= max_skip_; ++skip) {
      // A huge max_skip_count (up to 2^63 - 1) must not loop past the row: once a skip puts
      // the second token of an n-gram beyond it, no larger skip counts anything. An n-gram
      // longer than the row never fits either (and skip * (first_size - 1) stays below n^2).
      if (first_size > 1 && (skip >= n || first_size > n)) break;
      for (int64_t start = 0; start + skip * (first_size - 1) < n; ++start) {
        int32_t node = 0;
        int64_t size = 1;
        for (int64_t at = start; size <= max_gram_ && at < n; at += skip, ++size) {
          node = trie_.child(node, tok[at]);
          if (node < 0) break;
          int64_t col = trie_.nodes[static_cast<size_t>(node)].column;
          if (size >= first_size && col >= 0) out[col] += 1.0f;
        }
      }
      if (first_size == 1) {
        if (++first_size > max_gram_) break;
      }
    }
  }

  void weigh_row(float* row) const {
    bool weighted = !weights_.empty();
    for (int64_t i = 0; i < width_; ++i) {
      float w = weighted && static_cast<size_t>(i) < weights_.size() ? weights_[i] : 1.0f;
      if (weighting_ == Weighting::IDF)
        row[i] = row[i] > 0 ? w : 0.0f;
      else if (weighting_ == Weighting::TFIDF)
        row[i] *= w;
    }
  }

  Weighting weighting_ = Weighting::TF;
  int64_t min_gram_ = 1, max_gram_ = 1, max_skip_ = 0, width_ = 0;
  bool strings_ = false;
  std::vector<float> weights_;
  std::unordered_map<std::string, int64_t> vocab_;
  NgramTrie trie_;
};

}  // namespace

void register_tfidf_kernels(KernelRegistry& r) {
  r.add({"TfIdfVectorizer",
         "",
         9,
         INT_MAX,
         "cpu",
         0,
         {DataType::String, DataType::Int32, DataType::Int64},
         make_factory<TfIdfVectorizerKernel>()});
}

}  // namespace onyx::cpu
