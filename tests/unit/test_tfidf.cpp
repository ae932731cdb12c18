// TfIdfVectorizer against hand-counted n-grams (skips, unigrams + bigrams, strings, IDF and
// TFIDF weighting), plus bad inputs.
#include "test_util.h"

using namespace onyx;
using onyx::test::attr_floats;
using onyx::test::attr_int;
using onyx::test::attr_ints;
using onyx::test::attr_string;
using onyx::test::expect_near;
using onyx::test::run_op;
using onyx::test::T_;

namespace {

Attribute attr_strings(const std::string& n, std::vector<std::string> v) {
  Attribute a;
  a.name = n;
  a.type = Attribute::Type::Strings;
  a.strings = std::move(v);
  return a;
}

// Bigrams [94, 17], [17, 36], [94, 36] -> columns 0, 1, 2.
std::vector<Attribute> bigram_attrs(int64_t skip) {
  return {attr_string("mode", "TF"),
          attr_int("min_gram_length", 2),
          attr_int("max_gram_length", 2),
          attr_int("max_skip_count", skip),
          attr_ints("ngram_counts", {0, 0}),
          attr_ints("ngram_indexes", {0, 1, 2}),
          attr_ints("pool_int64s", {94, 17, 17, 36, 94, 36})};
}

const Tensor kTokens = T_<int64_t>({5}, {94, 17, 36, 94, 17});

TEST(TfIdfVectorizer, BigramsWithoutSkips) {
  // Adjacent pairs: (94,17) (17,36) (36,94) (94,17).
  auto y = run_op("TfIdfVectorizer", {{"x", kTokens}}, bigram_attrs(0), 1, 9);
  EXPECT_EQ(y.at("y0").shape(), (Shape{3}));
  expect_near(y.at("y0"), {2, 1, 0});
}

TEST(TfIdfVectorizer, SkipsAddDistantPairs) {
  // Skip 1 adds (94,36) (17,94) (36,17).
  auto y = run_op("TfIdfVectorizer", {{"x", kTokens}}, bigram_attrs(1), 1, 9);
  expect_near(y.at("y0"), {2, 1, 1});
}

TEST(TfIdfVectorizer, HugeMaxSkipCountStopsAtTheRowEnd) {
  // Skips 3 and 4 add (94,94) (17,17) and (94,17); no pair is farther apart in 5 tokens, so
  // 2^40 and INT64_MAX end there (2^40 passes over the row timed out before).
  for (int64_t skip : {int64_t{3}, int64_t{1} << 40, INT64_MAX}) {
    auto y = run_op("TfIdfVectorizer", {{"x", kTokens}}, bigram_attrs(skip), 1, 9);
    expect_near(y.at("y0"), {3, 1, 1});
  }
}

TEST(TfIdfVectorizer, BatchedInt32Rows) {
  auto y = run_op("TfIdfVectorizer", {{"x", T_<int32_t>({2, 3}, {94, 17, 36, 36, 94, 36})}},
                  bigram_attrs(0), 1, 9);
  EXPECT_EQ(y.at("y0").shape(), (Shape{2, 3}));
  expect_near(y.at("y0"), {1, 1, 0, 0, 0, 1});
}

std::vector<Attribute> string_attrs(const std::string& mode) {
  // Unigrams "a", "b" (columns 0, 1) and the bigram "a b" (column 2).
  return {attr_string("mode", mode),           attr_int("min_gram_length", 1),
          attr_int("max_gram_length", 2),      attr_int("max_skip_count", 0),
          attr_ints("ngram_counts", {0, 2}),   attr_ints("ngram_indexes", {0, 1, 2}),
          attr_floats("weights", {1, 2, 0.5}), attr_strings("pool_strings", {"a", "b", "a", "b"})};
}

TEST(TfIdfVectorizer, StringPoolWithWeights) {
  Tensor x = Tensor::from_vector<std::string>({4}, {"a", "b", "a", "c"});
  // Counts: a 2, b 1, "a b" 1.
  expect_near(run_op("TfIdfVectorizer", {{"x", x}}, string_attrs("TF"), 1, 9).at("y0"), {2, 1, 1});
  expect_near(run_op("TfIdfVectorizer", {{"x", x}}, string_attrs("TFIDF"), 1, 9).at("y0"),
              {2, 2, 0.5});
  expect_near(run_op("TfIdfVectorizer", {{"x", x}}, string_attrs("IDF"), 1, 9).at("y0"),
              {1, 2, 0.5});
}

TEST(TfIdfVectorizer, BadInputsAreErrors) {
  Tensor words = Tensor::from_vector<std::string>({2}, {"a", "b"});
  EXPECT_THROW(run_op("TfIdfVectorizer", {{"x", words}}, bigram_attrs(0), 1, 9), Error);
  EXPECT_THROW(
      run_op("TfIdfVectorizer", {{"x", T_<int64_t>({1, 1, 2}, {94, 17})}}, bigram_attrs(0), 1, 9),
      Error);
}

}  // namespace
