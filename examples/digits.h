// The digits data set for the training examples: 1,797 8x8 grey images of handwritten digits
// from digits.csv.gz as Debian's python3-sklearn ships it (one image per line: 64 pixel values
// in 0..16, then the digit). Read with zlib; no Python needed.
//
//   digits::Data all =
//   digits::read("/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"); auto
//   [train, test] = digits::split(all);      // every 5th image held out: 1,437 / 360 onyx::Tensor
//   x = digits::images(train, order, 0, 32, {32, 64});   // one batch
#pragma once

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "graph/error.h"
#include "graph/tensor.h"

namespace digits {

inline constexpr const char* kDefaultCsv =
    "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz";

/// Images as rows of 64 floats in [0, 1] and their digits.
struct Data {
  std::vector<float> pixels;  // [size() * 64]
  std::vector<int64_t> labels;
  size_t size() const { return labels.size(); }
};

/// Reads and checks the csv.gz; onyx::Error for a missing file or a malformed line.
inline Data read(const std::string& path) {
  gzFile f = gzopen(path.c_str(), "rb");
  ONYX_CHECK(f != nullptr, "[digits] cannot open '{}' (Debian: apt-get install python3-sklearn)",
             path);
  std::string text;
  char buf[1 << 16];
  for (int n; (n = gzread(f, buf, sizeof buf)) > 0;) text.append(buf, static_cast<size_t>(n));
  gzclose(f);
  Data d;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    if (line.empty()) continue;
    std::vector<double> v;
    std::istringstream cells(line);
    for (std::string cell; std::getline(cells, cell, ',');) v.push_back(std::stod(cell));
    ONYX_CHECK(v.size() == 65 && v[64] >= 0 && v[64] <= 9,
               "[digits] '{}' line {}: expected 64 pixels and a digit, found {} values", path,
               d.size() + 1, v.size());
    for (int i = 0; i < 64; ++i) d.pixels.push_back(static_cast<float>(v[i] / 16.0));
    d.labels.push_back(static_cast<int64_t>(v[64]));
  }
  ONYX_CHECK(d.size() > 0, "[digits] '{}' holds no images", path);
  return d;
}

/// Every fifth image (index % 5 == 0) held out for test, as tools/prepare_digits.py does.
inline std::pair<Data, Data> split(const Data& all) {
  Data train, test;
  for (size_t i = 0; i < all.size(); ++i) {
    Data& to = i % 5 == 0 ? test : train;
    to.pixels.insert(to.pixels.end(), all.pixels.begin() + i * 64,
                     all.pixels.begin() + i * 64 + 64);
    to.labels.push_back(all.labels[i]);
  }
  return {train, test};
}

/// 0, 1, ..., n-1 in an order drawn from `rng` (Fisher-Yates; the same on every platform).
inline std::vector<size_t> shuffled(size_t n, std::mt19937_64& rng) {
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = i;
  for (size_t i = n; i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
  return order;
}

/// Images order[begin, end) as a float tensor of `shape` (first dim end - begin).
inline onyx::Tensor images(const Data& d, const std::vector<size_t>& order, size_t begin,
                           size_t end, onyx::Shape shape) {
  onyx::Tensor t = onyx::Tensor::empty(onyx::DataType::Float, shape);
  float* out = t.data<float>();
  for (size_t i = begin; i < end; ++i, out += 64)
    std::copy_n(d.pixels.begin() + order[i] * 64, 64, out);
  return t;
}

/// Labels order[begin, end) as an int64 tensor [end - begin].
inline onyx::Tensor labels(const Data& d, const std::vector<size_t>& order, size_t begin,
                           size_t end) {
  std::vector<int64_t> v;
  for (size_t i = begin; i < end; ++i) v.push_back(d.labels[order[i]]);
  return onyx::Tensor::from_vector<int64_t>({static_cast<int64_t>(v.size())}, v);
}

/// Fraction of rows of `logits` [N, 10] whose largest entry is at labels[order[begin + row]].
inline double accuracy(const onyx::Tensor& logits, const Data& d, const std::vector<size_t>& order,
                       size_t begin) {
  const float* p = logits.data<float>();
  int64_t n = logits.shape()[0], c = logits.shape()[1], right = 0;
  for (int64_t r = 0; r < n; ++r) {
    int64_t best = std::max_element(p + r * c, p + r * c + c) - (p + r * c);
    right += best == d.labels[order[begin + static_cast<size_t>(r)]];
  }
  return static_cast<double>(right) / static_cast<double>(n);
}

}  // namespace digits
