// The loss curve of an `onyx train` run as a PNG, drawn with PLplot (Debian: libplplot-dev
// and plplot-driver-cairo). Builds without PLplot link loss_plot_none.cpp instead, whose
// plot_loss_png throws a clear "built without PLplot" error.
#pragma once

#include <string>
#include <vector>

namespace onyx::cli {

/// Training loss per optimizer step, and optional validation loss per epoch (at the step the
/// epoch ended).
struct LossCurve {
  std::vector<double> steps, loss;
  std::vector<double> val_steps, val_loss;
};

/// True when this build can draw plots.
bool loss_plot_available();

/// Writes `curve` to `path` as an 800x500 PNG titled `title`; the loss axis is logarithmic when
/// every value is positive. onyx::Error "[plot] ..." when there is nothing to plot, a value is
/// not finite, the file cannot be written, or the build lacks PLplot.
void plot_loss_png(const LossCurve& curve, const std::string& path, const std::string& title);

}  // namespace onyx::cli
