#!/usr/bin/env bash
# The provider seal (ARCHITECTURE.md): nothing outside kernels/ includes kernels/cpu/* or
# kernels/cuda/*; upper layers reach a device through kernels/provider.h. Tests and benches
# of the CPU kernels' internals may include them. Prints each offending line; exit 1 if any.
set -euo pipefail
cd "$(dirname "$0")/.."
layers=(graph inference autodiff optimizers training distributed interop python launcher examples include)
present=()
for d in "${layers[@]}"; do [[ -d $d ]] && present+=("$d"); done
if hits=$(grep -rnE '#include +"kernels/(cpu|cuda)/' --include='*.cpp' --include='*.h' --include='*.inc' \
          --include='*.cu' "${present[@]}"); then
  echo "check_layers: these files outside kernels/ include a provider's internals:"
  echo "$hits"
  exit 1
fi
echo "check_layers: sealed: no file under ${present[*]} includes a kernels/cpu or kernels/cuda header"
