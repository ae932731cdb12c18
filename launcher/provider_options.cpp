// --provider / --device: which execution providers a session places nodes on.
#include <sstream>

#include "launcher/commands.h"

namespace onyx::cli {

void add_provider_options(CLI::App* app, ProviderOptions& o) {
  app->add_option("--provider", o.providers,
                  "Execution providers in priority order, comma-separated (cuda, cpu); nodes "
                  "without a kernel on the first fall back to the next, cpu last")
      ->capture_default_str();
  app->add_option("--device", o.device, "Device index of the non-CPU providers (cuda:N)")
      ->capture_default_str();
}

void apply_provider_options(const ProviderOptions& o, std::vector<std::string>& providers, int& device_id) {
  providers.clear();
  std::stringstream ss(o.providers);
  for (std::string name; std::getline(ss, name, ',');)
    if (!name.empty()) providers.push_back(name);
  device_id = o.device;
}

}  // namespace onyx::cli
