// plot_loss_png with PLplot's pngcairo driver.
#include <plplot.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "graph/error.h"
#include "launcher/loss_plot.h"

namespace onyx::cli {

namespace {

/// PLplot calls exit() after a fatal error's handler returns; throwing from the handler keeps
/// the process alive (Debian builds PLplot with unwind tables). The checks in plot_loss_png
/// rule out the fatal errors we know of.
int throw_on_plplot_exit(const char* message) {
  ONYX_THROW("[plot] PLplot failed: {}", message ? message : "unknown error");
}

/// Ends the PLplot stream however the drawing code is left.
struct StreamGuard {
  ~StreamGuard() { plend1(); }
};

}  // namespace

bool loss_plot_available() { return true; }

void plot_loss_png(const LossCurve& curve, const std::string& path, const std::string& title) {
  ONYX_CHECK(!curve.loss.empty() && curve.steps.size() == curve.loss.size() &&
                 curve.val_steps.size() == curve.val_loss.size(),
             "[plot] nothing to plot into '{}' (no training steps were recorded)", path);
  std::vector<double> all = curve.loss;
  all.insert(all.end(), curve.val_loss.begin(), curve.val_loss.end());
  bool finite = std::all_of(all.begin(), all.end(), [](double v) { return std::isfinite(v); });
  ONYX_CHECK(finite, "[plot] the loss curve for '{}' holds NaN or infinite values", path);
  // Fail here, with a clear message, rather than inside PLplot's file handling.
  std::FILE* probe = std::fopen(path.c_str(), "wb");
  ONYX_CHECK(probe != nullptr, "[plot] cannot write '{}'", path);
  std::fclose(probe);

  bool log_y = std::all_of(all.begin(), all.end(), [](double v) { return v > 0; });
  auto y_of = [&](double v) { return log_y ? std::log10(v) : v; };
  std::vector<double> y, vy;
  for (double v : curve.loss) y.push_back(y_of(v));
  for (double v : curve.val_loss) vy.push_back(y_of(v));
  auto [ylo_it, yhi_it] = std::minmax_element(y.begin(), y.end());
  double ylo = *ylo_it, yhi = *yhi_it;
  for (double v : vy) ylo = std::min(ylo, v), yhi = std::max(yhi, v);
  double pad = std::max(0.05 * (yhi - ylo), 1e-3);
  double xlo = curve.steps.front(), xhi = std::max(curve.steps.back(), xlo + 1);
  for (double s : curve.val_steps) xhi = std::max(xhi, s);

  PLINT stream = 0;
  plmkstrm(&stream);
  StreamGuard guard;
  plsexit(throw_on_plplot_exit);
  plsdev("pngcairo");
  plsfnam(path.c_str());
  plspage(0, 0, 800, 500, 0, 0);
  plscol0(0, 255, 255, 255);  // background
  plscol0(1, 0, 0, 0);        // axes and labels
  plscol0(2, 31, 119, 180);   // training loss
  plscol0(3, 255, 127, 14);   // validation loss
  plinit();
  plcol0(1);
  plenv(xlo, xhi, ylo - pad, yhi + pad, 0, log_y ? 20 : 0);
  pllab("optimizer step", log_y ? "loss (log scale)" : "loss", title.c_str());
  plcol0(2);
  plwidth(1.5);
  plline(static_cast<PLINT>(y.size()), curve.steps.data(), y.data());
  plmtex("t", -1.5, 0.97, 1.0, "training loss");
  if (!vy.empty()) {
    plcol0(3);
    plwidth(2.5);
    plline(static_cast<PLINT>(vy.size()), curve.val_steps.data(), vy.data());
    plpoin(static_cast<PLINT>(vy.size()), curve.val_steps.data(), vy.data(), 17);
    plmtex("t", -3.0, 0.97, 1.0, "validation loss (per epoch)");
  }
}

}  // namespace onyx::cli
