// Every collective x dtype x size against float64 references, with rank-dependent data.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "collective_reference.h"
#include "distributed/p2p_allreduce.h"
#include "distributed/ring_allreduce.h"
#include "mpi_test_main.h"

namespace onyx::dist::test {
namespace {

template <typename T>
void check_allreduce(Communicator& c, int64_t n, ReduceOp op) {
  Tensor t = filled<T>(c.rank(), n);
  c.allreduce(t, op)->wait();
  bool integer = std::is_integral_v<T>;
  expect_all<T>(
      t, [&](int64_t i) { return reference(op, c.size(), i, std::is_unsigned_v<T>, integer); },
      fmt::format("allreduce {} of {} x {}", reduce_op_name(op), n, dtype_name(dtype_of<T>())));
}

template <typename T>
void check_broadcast(Communicator& c, int64_t n) {
  int root = c.size() - 1;
  Tensor t = filled<T>(c.rank(), n);
  c.broadcast(t, root)->wait();
  expect_all<T>(
      t, [&](int64_t i) { return double(value(root, i, std::is_unsigned_v<T>)); },
      fmt::format("broadcast of {} x {}", n, dtype_name(dtype_of<T>())));
}

template <typename T>
void check_allgather(Communicator& c, int64_t n) {
  Tensor in = filled<T>(c.rank(), n);
  Tensor out = Tensor::zeros(dtype_of<T>(), {n * c.size()});
  c.allgather(in, out)->wait();
  expect_all<T>(
      out, [&](int64_t j) { return double(value(int(j / n), j % n, std::is_unsigned_v<T>)); },
      fmt::format("allgather of {} x {}", n, dtype_name(dtype_of<T>())));
}

template <typename T>
void check_reduce_scatter(Communicator& c, int64_t n, ReduceOp op) {
  Tensor in = filled<T>(c.rank(), n * c.size());
  Tensor out = Tensor::zeros(dtype_of<T>(), {n});
  c.reduce_scatter(in, out, op)->wait();
  int64_t first = c.rank() * n;
  expect_all<T>(
      out,
      [&](int64_t i) {
        return reference(op, c.size(), first + i, std::is_unsigned_v<T>, std::is_integral_v<T>);
      },
      fmt::format("reduce_scatter {} of {} x {}", reduce_op_name(op), n,
                  dtype_name(dtype_of<T>())));
}

template <typename T>
void check_everything(Communicator& c) {
  for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{1000}, int64_t{1} << 20}) {
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) check_allreduce<T>(c, n, op);
    check_broadcast<T>(c, n);
    check_allgather<T>(c, n);
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max}) check_reduce_scatter<T>(c, n, op);
  }
  check_reduce_scatter<T>(c, 1000, ReduceOp::Avg);
}

class Collectives : public testing::TestWithParam<DataType> {};

TEST_P(Collectives, MatchReferenceForSizesOneToOneMillion) {
  Communicator& c = world();
  switch (GetParam()) {
    case DataType::Float:
      check_everything<float>(c);
      break;
    case DataType::Double:
      check_everything<double>(c);
      break;
    case DataType::Float16:
      check_everything<float16>(c);
      break;
    case DataType::BFloat16:
      check_everything<bfloat16>(c);
      break;
    case DataType::Int8:
      check_everything<int8_t>(c);
      break;
    case DataType::UInt8:
      check_everything<uint8_t>(c);
      break;
    case DataType::Int32:
      check_everything<int32_t>(c);
      break;
    case DataType::Int64:
      check_everything<int64_t>(c);
      break;
    default:
      FAIL() << "no case for " << dtype_name(GetParam());
  }
}

INSTANTIATE_TEST_SUITE_P(AllDtypes, Collectives,
                         testing::Values(DataType::Float, DataType::Double, DataType::Float16,
                                         DataType::BFloat16, DataType::Int8, DataType::UInt8,
                                         DataType::Int32, DataType::Int64),
                         [](const auto& info) { return dtype_name(info.param); });

TEST(CollectivesLarge, TensOfMegabytes) {
  Communicator& c = world();
  const int64_t n = int64_t{12} << 20;  // 48 MB of float32
  check_allreduce<float>(c, n, ReduceOp::Sum);
  check_allreduce<float16>(c, n, ReduceOp::Avg);
  check_broadcast<float>(c, n);
  check_reduce_scatter<float>(c, n / c.size(), ReduceOp::Sum);
  check_allgather<int32_t>(c, n / c.size());
}

// The point-to-point allreduce schedules (p2p_allreduce.h): recursive doubling up to 64 KB on a
// power-of-two number of ranks, a pipelined ring cut into kRingSegmentBytes segments above (the
// last segment of a chunk one element short is empty and still exchanged). Sizes on both sides of
// each edge; values whose float sums round, so a schedule that added in a rank-dependent order
// would leave ranks with different bits. Every rank must hold the same bits (data-parallel
// replicas stay identical) and the float64 sum within float32 rounding.
TEST(CollectivesSchedules, SameBitsOnEveryRankAcrossScheduleAndSegmentEdges) {
  Communicator& c = world();
  const int64_t rd_edge = kRecursiveDoublingMaxBytes / 4, seg = kRingSegmentBytes / 4;
  const int64_t n_ranks = c.size();
  for (int64_t n : {int64_t{1}, int64_t{3}, rd_edge - 1, rd_edge, rd_edge + 1, seg * n_ranks - 1,
                    seg * n_ranks, seg * n_ranks + 1, 3 * seg * n_ranks + 7}) {
    auto v = [](int rank, int64_t i) {
      return 1.0f + static_cast<float>(std::fmod(std::sin(double(i) * 0.37 + rank * 1.9) * 977.0,
                                                 1.0) *
                                       0.5);
    };
    Tensor t = Tensor::empty(DataType::Float, {n});
    for (int64_t i = 0; i < n; ++i) t.data<float>()[i] = v(c.rank(), i);
    c.allreduce(t, ReduceOp::Sum)->wait();
    for (int64_t i = 0; i < n; ++i) {
      double want = 0;
      for (int r = 0; r < c.size(); ++r) want += double(v(r, i));
      const double got = t.data<float>()[i];
      if (std::fabs(got - want) > 4e-7 * c.size() * want) {
        ADD_FAILURE() << "allreduce sum of " << n << " floats: element " << i << " is " << got
                      << ", expected " << want;
        break;
      }
    }
    Tensor all = Tensor::zeros(DataType::Float, {n * c.size()});
    c.allgather(t, all)->wait();
    for (int r = 0; r < c.size(); ++r) {
      EXPECT_EQ(std::memcmp(all.data<float>() + r * n, t.data<float>(), size_t(n) * 4), 0)
          << "rank " << r << " holds other bits than rank " << c.rank() << " after an allreduce of "
          << n << " floats";
    }
  }
}

TEST(CollectivesInfo, RankSizeBackend) {
  Communicator& c = world();
  EXPECT_EQ(c.backend(), "mpi");
  EXPECT_GE(c.rank(), 0);
  EXPECT_LT(c.rank(), c.size());
  EXPECT_GE(c.local_rank(), 0);
  EXPECT_LT(c.local_rank(), c.size());
  // Every rank contributes its rank: the sum must be 0 + 1 + ... + size-1, the gather 0..size-1.
  Tensor r = Tensor::from_vector<int32_t>({1}, {c.rank()});
  Tensor all = Tensor::zeros(DataType::Int32, {c.size()});
  c.allgather(r, all)->wait();
  for (int i = 0; i < c.size(); ++i) EXPECT_EQ(all.data<int32_t>()[i], i);
  c.allreduce(r, ReduceOp::Sum)->wait();
  EXPECT_EQ(r.data<int32_t>()[0], c.size() * (c.size() - 1) / 2);
  c.barrier();
}

}  // namespace
}  // namespace onyx::dist::test
