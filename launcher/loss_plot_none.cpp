// Stand-in for loss_plot_plplot.cpp in builds without PLplot.
#include "graph/error.h"
#include "launcher/loss_plot.h"

namespace onyx::cli {

bool loss_plot_available() { return false; }

void plot_loss_png(const LossCurve&, const std::string& path, const std::string&) {
  ONYX_THROW(
      "[plot] cannot write '{}': this onyx was built without PLplot (Debian: apt-get "
      "install libplplot-dev plplot-driver-cairo, then rebuild)",
      path);
}

}  // namespace onyx::cli
