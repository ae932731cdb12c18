// Shared machinery of the fused optimizers (internal): the block plan, the step counter, the
// named float32 state buffers over the parameter span, state()/load_state(), and the factory
// functions of the concrete optimizers (sgd.cpp, adam.cpp, lamb.cpp). The updates themselves are
// the optimizer kernels (kernels/optimizer_kernels.h) of the device the parameters live on.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "optimizers/block_plan.h"
#include "optimizers/optimizer.h"

namespace onyx::optim {

class FusedOptimizer : public Optimizer {
 public:
  /// Allocates one zero-filled float32 buffer of span() elements per name in `buffers`, in host
  /// memory; the first step moves them to the parameters' device if that is another.
  FusedOptimizer(OptimizerConfig config, std::vector<ParamSegment> segments,
                 const std::vector<std::string>& buffers);

  /// Checks the arguments, counts the step, then calls update().
  void step(Tensor& params, const Tensor& grads, double lr, int threads) final;
  std::vector<std::pair<std::string, Tensor>> state() const final;
  void load_state(const std::vector<std::pair<std::string, Tensor>>& state) final;
  int64_t steps_taken() const final { return steps_; }

 protected:
  /// One update; steps_taken() already counts it (so it is the 1-based step t). params and
  /// grads are float32 buffers of at least span() elements on the state buffers' device.
  virtual void update(Tensor& params, const Tensor& grads, double lr, int threads) = 0;
  /// State buffer i (in the order given to the constructor).
  Tensor& buffer(size_t i) { return buffers_[i].second; }

  std::vector<ParamSegment> segments_;
  BlockPlan plan_;

 private:
  int64_t steps_ = 0;
  std::vector<std::pair<std::string, Tensor>> buffers_;
};

std::unique_ptr<Optimizer> make_sgd(const OptimizerConfig& config,
                                    std::vector<ParamSegment> segments);
/// Adam (L2 weight decay added to the gradient) or, with `decoupled`, AdamW.
std::unique_ptr<Optimizer> make_adam(const OptimizerConfig& config,
                                     std::vector<ParamSegment> segments, bool decoupled);
std::unique_ptr<Optimizer> make_lamb(const OptimizerConfig& config,
                                     std::vector<ParamSegment> segments);

}  // namespace onyx::optim
