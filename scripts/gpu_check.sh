#!/usr/bin/env bash
# The CUDA provider on a lent GPU machine (an H200; 15 minutes of device time per session, all
# tries together), in one call:
#
#   scripts/gpu_check.sh prepare [--no-build]   HERE: build the CUDA build's GPU test binaries
#                                               and the onyx CLI, check every kernel-test row's
#                                               CPU reference, stage .gpu/ (binaries + their
#                                               shared libraries, xz-packed)
#   scripts/gpu_check.sh device                 THERE: the device tool's command, with carry
#                                               [".gpu"]: `bash scripts/gpu_check.sh device`
#   scripts/gpu_check.sh closure BIN...         the shared libraries prepare would carry
#
# The device machine has nvcc, CMake, python3 with torch (2.11+cu130), onnx, onnxruntime and
# NVIDIA's cuBLAS / cuDNN / NCCL / CUDA-runtime wheels, but none of our Debian libraries
# (oneDNN, protobuf, ONNX, fmt, spdlog, Open MPI, ...) and no network. So the binaries are
# built here and travel with the ldd closure of their libraries, less glibc (the device's is
# newer; checked), the driver (libcuda) and the CUDA libraries, which come from the wheels
# (their sonames are checked there; libcudart, being small, also travels as a fallback).
#
# device mode, under a budget (GPU_CHECK_BUDGET_S, default 450 s; each stage has a `timeout`
# and none starts without time left):
#   1. nvidia-smi's line; unpack .gpu; LD_LIBRARY_PATH for our binaries only (python keeps the
#      device's own libstdc++); every NEEDED library resolved, or the run stops there
#   2. in the background: ResNet-50, BERT-base and GPT-2-small exported by torch
#      (bench/gen_torch_bench_models.py, seq 128); a failed export falls back to the
#      hand-written graph (bench/gen_bench_models.py)
#   3. meanwhile onyx_cuda_kernel_tests (gtest, brief); then onyx_cuda_model_tests on the models
#   4. `onyx bench --provider cuda` and PyTorch eager on the same GPU (CUDA events around each
#      run after warm-up, medians; and host in / host out as Session::run does), ONNX Runtime's
#      CUDA provider where onnxruntime has one; ONE table last
# Knobs: GPU_CHECK_BUDGET_S; GPU_CHECK_MODELS (default "torch_resnet50 torch_bert_base
# torch_gpt2_small"); GPU_CHECK_ROWS_FILTER (prepare's CPU-reference gtest filter).
# Everything for the caller is written under $OUT (at most 8 files: summary.md, env.txt,
# export.log, kernel_tests.log, model_tests.log, bench.log, bench.json).
set -uo pipefail

REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO" || exit 1
STAGE=.gpu
PACK=$STAGE/onyx-gpu.tar.xz
MANIFEST=$STAGE/MANIFEST.txt

die() {
  echo "gpu_check: $*" >&2
  exit 1
}

# ------------------------------------------------------------------------------------------
# The shared libraries of the binaries, as "soname<TAB>path<TAB>class": carry (travels),
# system (glibc and the loader: the device's own), driver (libcuda: the device's own), wheel
# (a CUDA library NVIDIA's wheels provide there), missing (ldd found none here).
closure() {
  local bin
  for bin in "$@"; do
    [ -f "$bin" ] || die "closure: no file $bin"
    ldd "$bin" || die "closure: ldd $bin failed"
  done | awk '
    /=>/ {
      name = $1; path = $3
      if (path == "not") { print name "\t-\tmissing"; next }
      cls = "carry"
      if (name ~ /^(ld-linux.*|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil|libanl|libnsl|libBrokenLocale)\.so/) cls = "system"
      else if (name ~ /^(libcuda\.so|libnvidia-|libnvcuvid)/) cls = "driver"
      else if (name ~ /^(libcudart|libcublas|libcublasLt|libcudnn|libnccl|libnvrtc|libnvJitLink|libcurand|libcufft|libcusparse|libcusolver|libcupti)[._]/) cls = "wheel"
      print name "\t" path "\t" cls
    }' | sort -u
}

# Highest GLIBC_x.y symbol version the files need.
glibc_needed() {
  local f
  for f in "$@"; do objdump -T "$f" 2>/dev/null; done | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' |
    sort -V | tail -1
}

# ------------------------------------------------------------------------------------------
prepare() {
  local build_bins=1
  [ "${1:-}" = "--no-build" ] && build_bins=0
  command -v cmake >/dev/null || die "cmake not found"
  # The build: $ONYX_GPU_BUILD, else build/ when it is a CUDA build (it is by default where
  # the toolkit is installed), else build-gpu/ configured here.
  local build=${ONYX_GPU_BUILD:-}
  if [ -z "$build" ]; then
    if grep -qs '^ONYX_WITH_CUDA:BOOL=ON' build/CMakeCache.txt; then build="build"; else build="build-gpu"; fi
  fi
  if [ ! -f "$build/CMakeCache.txt" ]; then
    [ $build_bins = 1 ] || die "$build is not configured (and --no-build)"
    local gen=()
    command -v ninja >/dev/null && gen=(-G Ninja)
    echo "== configuring $build (CUDA on, architectures ${ONYX_GPU_CUDA_ARCH:-90})"
    cmake -S . -B "$build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DONYX_WITH_CUDA=ON \
      -DONYX_BUILD_PYTHON=OFF -DONYX_TORCH=OFF -DONYX_BUILD_BENCH=OFF \
      -DCMAKE_CUDA_ARCHITECTURES="${ONYX_GPU_CUDA_ARCH:-90}" || die "cmake configure failed"
  fi
  grep -qs '^ONYX_WITH_CUDA:BOOL=ON' "$build/CMakeCache.txt" ||
    die "$build is not a CUDA build (ONYX_WITH_CUDA is not ON in its CMakeCache.txt)"
  local archs
  archs=$(sed -n 's/^CMAKE_CUDA_ARCHITECTURES:[A-Z]*=//p' "$build/CMakeCache.txt")
  case " ${archs//;/ } " in
    *" 90"* | *" native"*) ;;  # 90, 90-real, 90a
    *) echo "gpu_check: WARNING: $build builds CUDA architectures '$archs' without 90 (the H200 runs PTX JIT or fails)" ;;
  esac
  if [ $build_bins = 1 ]; then
    echo "== building onyx, onyx_cuda_kernel_tests, onyx_cuda_model_tests in $build"
    cmake --build "$build" --target onyx onyx_cuda_kernel_tests onyx_cuda_model_tests \
      -j "$(nproc)" || die "build failed"
  fi
  local bins=("$build/launcher/onyx" "$build/tests/gpu/onyx_cuda_kernel_tests"
    "$build/tests/gpu/onyx_cuda_model_tests")
  local b
  for b in "${bins[@]}"; do [ -x "$b" ] || die "missing $b (build it, or drop --no-build)"; done

  # Every row of the kernel table must run on the CPU before a GPU machine is spent on it.
  echo "== kernel-test rows: CPU references, and the no-device error"
  local rows_log=/tmp/gpu_check_rows.log
  if ! ONYX_CUDA_TEST_CPU_REFERENCE=1 timeout 900 "$build/tests/gpu/onyx_cuda_kernel_tests" \
    --gtest_brief=1 --gtest_filter="${GPU_CHECK_ROWS_FILTER:-Ops/*:CudaProvider.*}" >"$rows_log" 2>&1; then
    grep -E '^\[  FAILED  \]|Failure|rror' "$rows_log" | head -40
    die "kernel tests fail without a device (log: $rows_log); fix them before spending device time"
  fi
  grep -E '^\[==========\]|^\[  PASSED  \]|^\[  SKIPPED \] [0-9]' /tmp/gpu_check_rows.log

  echo "== staging $STAGE"
  local tmp
  tmp=$(mktemp -d)
  STAGING_TMP=$tmp
  trap 'rm -rf "$STAGING_TMP"' EXIT
  mkdir -p "$tmp/bin" "$tmp/lib/fallback"
  for b in "${bins[@]}"; do
    cp "$b" "$tmp/bin/" || die "copy $b"
    strip --strip-all "$tmp/bin/$(basename "$b")" || die "strip $b"
  done
  closure "${bins[@]}" >"$tmp/closure.tsv" || die "ldd failed"
  if grep -q $'\tmissing$' "$tmp/closure.tsv"; then
    grep $'\tmissing$' "$tmp/closure.tsv"
    die "libraries not found here"
  fi
  local name path cls carried=() wheel=()
  while IFS=$'\t' read -r name path cls; do
    case $cls in
      carry)
        cp -L "$path" "$tmp/lib/$name" || die "copy $path"
        chmod u+w "$tmp/lib/$name"
        strip --strip-unneeded "$tmp/lib/$name" 2>/dev/null
        carried+=("$name")
        ;;
      wheel)
        wheel+=("$name")
        # libcudart is small: a fallback where no wheel provides this soname.
        case $name in libcudart.so.*) cp -L "$path" "$tmp/lib/fallback/$name" ;; esac
        ;;
    esac
  done <"$tmp/closure.tsv"
  # cuBLASLt is opened with dlopen on first use (kernels/cuda/cublaslt_loader.cpp), so ldd does
  # not list it: its soname, as the binaries spell it, joins the wheel libraries checked there.
  local lt
  lt=$(grep -aoE 'libcublasLt\.so\.[0-9]+' "$build/tests/gpu/onyx_cuda_kernel_tests" | head -1)
  [ -n "$lt" ] || die "the CUDA kernel tests name no libcublasLt.so.N to open"
  wheel+=("$lt")
  local glibc
  glibc=$(glibc_needed "$tmp"/bin/* "$tmp"/lib/*.so*)
  local ver_h=/usr/local/cuda/include
  local cudnn cublas cudart
  cudnn=$(awk '/define CUDNN_MAJOR/{a=$3}/define CUDNN_MINOR/{b=$3}/define CUDNN_PATCHLEVEL/{c=$3}END{print a"."b"."c}' "$ver_h/cudnn_version.h" 2>/dev/null)
  cublas=$(awk '/define CUBLAS_VER_MAJOR/{a=$3}/define CUBLAS_VER_MINOR/{b=$3}/define CUBLAS_VER_PATCH /{c=$3}END{print a"."b"."c}' "$ver_h/cublas_api.h" 2>/dev/null)
  cudart=$(awk '/define CUDART_VERSION/{print $3}' "$ver_h/cuda_runtime_api.h" 2>/dev/null)
  {
    echo "commit $(git rev-parse HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' (+ uncommitted changes)')"
    echo "made $(date -u +%FT%TZ) on $(hostname) from $build (CUDA architectures ${archs})"
    echo "glibc_needed $glibc"
    echo "cudnn_built $cudnn"
    echo "cublas_built $cublas"
    echo "cudart_built $cudart"
    echo "from_wheels ${wheel[*]}"
    echo "carried ${carried[*]}"
  } >"$tmp/MANIFEST.txt"
  cp "$tmp/closure.tsv" "$tmp/lib/closure.tsv"

  rm -rf "$STAGE"
  mkdir -p "$STAGE"
  cp "$tmp/MANIFEST.txt" "$MANIFEST"
  (cd "$tmp" && tar -cf - bin lib MANIFEST.txt) | xz -T0 -6 >"$PACK" || die "packing failed"
  local exclude
  exclude=$(git rev-parse --git-path info/exclude 2>/dev/null)
  if [ -n "$exclude" ]; then
    mkdir -p "$(dirname "$exclude")"
    grep -qxF "/$STAGE/" "$exclude" 2>/dev/null || echo "/$STAGE/" >>"$exclude"
  fi
  local raw packed tree
  raw=$(du -sb "$tmp/bin" "$tmp/lib" | awk '{s+=$1}END{print s}')
  packed=$(du -sb "$STAGE" | awk '{print $1}')
  tree=$(git ls-files -co --exclude-standard -z | du --files0-from=- -cb 2>/dev/null | tail -1 | cut -f1)
  cat "$MANIFEST"
  awk -v r="$raw" -v p="$packed" -v t="${tree:-0}" 'BEGIN{
    printf "== %s: %.1f MiB (%.1f MiB unpacked); the rest of the working tree %.1f MiB; limit 64 MiB together\n",
      ".gpu", p/1048576, r/1048576, t/1048576 }'
  if [ "$packed" -gt $((60 * 1048576)) ]; then die ".gpu is over 60 MiB"; fi
  echo "== ready: device tool, carry [\".gpu\"], command: bash scripts/gpu_check.sh device"
}

# ------------------------------------------------------------------------------------------
device() {
  local t0=$SECONDS budget=${GPU_CHECK_BUDGET_S:-450}
  OUT=${OUT:-/tmp/gpu_check_out}
  mkdir -p "$OUT"
  local work=/tmp/onyx-gpu models=/tmp/onyx-gpu-models scratch=/tmp/onyx-gpu-scratch
  local summary=$OUT/summary.md env_txt=$OUT/env.txt
  rm -rf "$work" "$scratch"
  mkdir -p "$work" "$models" "$scratch"
  : >"$summary"
  trap 'jobs -p | xargs -r kill 2>/dev/null' EXIT
  note() { echo "$*" | tee -a "$summary"; }
  # Seconds a stage may take: its cap, or what is left of the budget less a margin.
  allot() {
    local left=$((budget - (SECONDS - t0) - 15))
    [ "$left" -lt "$1" ] && echo "$left" || echo "$1"
  }
  enough() { [ "$(allot "$1")" -ge "$2" ]; }

  echo "# gpu_check device ($(date -u +%FT%TZ), budget ${budget}s)" >>"$summary"
  local gpu
  gpu=$(timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,temperature.gpu,utilization.gpu,memory.used \
    --format=csv,noheader 2>&1 | head -1)
  note "gpu: ${gpu:-nvidia-smi gave nothing}"
  { timeout 30 nvidia-smi 2>&1; echo; } >"$env_txt"

  # Unpack (python's tarfile where there is no xz).
  [ -f "$PACK" ] || { note "FAIL: no $PACK: run scripts/gpu_check.sh prepare here and carry .gpu"; return 1; }
  if ! tar -xJf "$PACK" -C "$work" 2>/dev/null; then
    python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$PACK" "$work" ||
      { note "FAIL: cannot unpack $PACK"; return 1; }
  fi
  cat "$work/MANIFEST.txt" >>"$env_txt"

  # Library path for our binaries only: carried libraries, NVIDIA's wheels, the fallbacks.
  local wheels
  wheels=$(timeout 60 python3 - <<'PY' 2>>"$env_txt"
import glob, importlib.util, os
dirs = []
for pkg in ("nvidia", "torch"):
    spec = importlib.util.find_spec(pkg)
    for root in (spec.submodule_search_locations or []) if spec else []:
        for d in sorted(glob.glob(os.path.join(root, "**", "lib"), recursive=True)):
            if glob.glob(os.path.join(d, "lib*.so*")):
                dirs.append(d)
print(":".join(dict.fromkeys(dirs)))
PY
  )
  local ld="$work/lib:${wheels}:$work/lib/fallback"
  [ -d /usr/local/nvidia/lib64 ] && ld="$ld:/usr/local/nvidia/lib64"
  onyx_env() { env LD_LIBRARY_PATH="$ld${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$@"; }
  {
    echo "== LD_LIBRARY_PATH for the onyx binaries"
    echo "$ld" | tr ':' '\n'
    echo "== resolution"
    onyx_env ldd "$work"/bin/* 2>&1
    echo "== versions"
    getconf GNU_LIBC_VERSION
    timeout 60 python3 -m pip list 2>/dev/null | grep -iE '^(torch|onnx|onnxruntime[a-z-]*|nvidia-(cudnn|cublas|cuda-runtime|nccl)[a-z0-9-]*) '
  } >>"$env_txt" 2>&1
  local missing
  missing=$(onyx_env ldd "$work"/bin/* 2>&1 | grep 'not found' | sort -u)
  # Opened at run time, not linked: look for it where dlopen will.
  local lt dir found=""
  lt=$(sed -n 's/^from_wheels //p' "$work/MANIFEST.txt" | tr ' ' '\n' | grep '^libcublasLt' | head -1)
  if [ -n "$lt" ]; then
    for dir in ${ld//:/ }; do [ -e "$dir/$lt" ] && found="$dir/$lt" && break; done
    [ -n "$found" ] || missing="$missing${missing:+ }$lt => not found (dlopen)"
  fi
  local resolved
  resolved=$(onyx_env ldd "$work/bin/onyx_cuda_kernel_tests" 2>/dev/null |
    awk '$1 ~ /^lib(cudart|cublasLt|cudnn|cuda)\.so/ {printf "%s -> %s; ", $1, $3}')
  note "libs: ${resolved:-none of cudart/cudnn/cuda linked?}${found:+ $lt (dlopen) -> $found}"
  if [ -n "$missing" ]; then
    note "FAIL: libraries not found on the device:"
    note "$missing"
    return 1
  fi
  # Versions: ours against the wheels'.
  local need have cudnn_built cudnn_wheel
  need=$(sed -n 's/^glibc_needed //p' "$work/MANIFEST.txt")
  have=$(getconf GNU_LIBC_VERSION | awk '{print $2}')
  if [ -n "$need" ] && [ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -1)" != "$need" ]; then
    note "WARNING: the binaries need glibc $need, the device has $have"
  fi
  cudnn_built=$(sed -n 's/^cudnn_built //p' "$work/MANIFEST.txt")
  cudnn_wheel=$(grep -i '^nvidia-cudnn' "$env_txt" | awk '{print $2}' | head -1)
  note "cuDNN built against $cudnn_built, wheel ${cudnn_wheel:-?}; cuBLAS built $(sed -n 's/^cublas_built //p' "$work/MANIFEST.txt"), wheel $(grep -i '^nvidia-cublas' "$env_txt" | awk '{print $2}' | head -1)"
  if [ -n "$cudnn_wheel" ] && [ -n "$cudnn_built" ] &&
    [ "$(printf '%s\n%s\n' "$cudnn_built" "$cudnn_wheel" | sort -V | head -1)" != "$cudnn_built" ]; then
    note "WARNING: the device's cuDNN ($cudnn_wheel) is older than the headers we built against ($cudnn_built)"
  fi

  # 2. Model exports in the background (CPU only), one process per model.
  local names
  read -r -a names <<<"${GPU_CHECK_MODELS:-torch_resnet50 torch_bert_base torch_gpt2_small}"
  declare -A fallback=([torch_resnet50]=resnet50 [torch_bert_base]=bert_base [torch_gpt2_small]=gpt2_small)
  local export_pids=() n
  if enough 300 60; then
    for n in "${names[@]}"; do
      (OMP_NUM_THREADS=4 timeout -k 5 "$(allot 300)" python3 bench/gen_torch_bench_models.py --out "$models" \
        --only "$n" >"$scratch/export_$n.log" 2>&1; echo "rc $?" >>"$scratch/export_$n.log") &
      export_pids+=($!)
    done
  fi

  # 3. Kernel tests (meanwhile).
  local kt=$OUT/kernel_tests.log
  if enough 300 30; then
    local s=$SECONDS
    onyx_env timeout -k 5 "$(allot 300)" "$work/bin/onyx_cuda_kernel_tests" --gtest_brief=1 >"$kt" 2>&1
    local rc=$?
    note "kernel tests: rc $rc in $((SECONDS - s))s; $(gtest_counts "$kt")"
    grep -E '^\[  FAILED  \] ' "$kt" | sed 's/, where GetParam.*//' | sort -u | head -40 | tee -a "$summary"
  else
    note "kernel tests: not run (budget)"
  fi

  # Wait for the exports; fall back to the hand-written graphs where they failed.
  local pid
  for pid in "${export_pids[@]}"; do wait "$pid"; done
  : >"$OUT/export.log"
  declare -A model_dir
  for n in "${names[@]}"; do
    cat "$scratch/export_$n.log" >>"$OUT/export.log" 2>/dev/null
    if [ -f "$models/$n/model.onnx" ]; then
      model_dir[$n]=$n
    elif enough 120 20; then
      echo "== $n: torch export failed; bench/gen_bench_models.py --only ${fallback[$n]}" >>"$OUT/export.log"
      timeout -k 5 "$(allot 120)" python3 bench/gen_bench_models.py --out "$models" --only "${fallback[$n]}" \
        >>"$OUT/export.log" 2>&1
      [ -f "$models/${fallback[$n]}/model.onnx" ] && model_dir[$n]=${fallback[$n]}
    fi
    note "model $n: ${model_dir[$n]:-none}$([ "${model_dir[$n]:-}" = "${fallback[$n]}" ] && echo ' (hand-written graph: the torch export failed, see export.log)')"
  done

  # Model tests.
  local mt=$OUT/model_tests.log
  if enough 300 40; then
    local s=$SECONDS
    ONYX_GPU_MODELS=$models onyx_env timeout -k 5 "$(allot 300)" "$work/bin/onyx_cuda_model_tests" >"$mt" 2>&1
    local rc=$?
    note "model tests: rc $rc in $((SECONDS - s))s; $(gtest_counts "$mt")"
    # Per model: its placement counts, accuracy, second-run time, and the verdict (a skip
    # with its reason).
    awk '/^\[ RUN/ {sub(/.*MatchesCpuWithoutFallback\//, ""); print "  " $0; next}
         /^  (model|placement|second CUDA run)|relative L2/ {print "  " $0; next}
         /Skipped$/ {getline; print "    skipped: " $0; next}
         /^\[  FAILED  \] Models.*\([0-9]+ ms\)$/ {print "    FAILED"}' "$mt" | head -60 | tee -a "$summary"
  else
    note "model tests: not run (budget)"
  fi

  # 4. Timings: onyx (each model in its own process), then torch eager and ORT in one python.
  local rows=$scratch/rows.tsv bl=$OUT/bench.log
  : >"$rows"
  : >"$bl"
  local spec label key batch iters warm dir p50
  for spec in "resnet50 torch_resnet50 1 100 10" "resnet50 torch_resnet50 32 20 3" \
    "bert_base torch_bert_base 1 50 10" "gpt2_small torch_gpt2_small 1 50 10"; do
    read -r label key batch iters warm <<<"$spec"
    dir=${model_dir[$key]:-}
    p50=""
    if [ -z "$dir" ]; then
      p50="no model"
    elif enough 120 20; then
      echo "== onyx bench $dir batch $batch" >>"$bl"
      onyx_env timeout -k 5 "$(allot 120)" "$work/bin/onyx" bench "$models/$dir/model.onnx" --provider cuda \
        -b "$batch" -n "$iters" -w "$warm" >>"$bl" 2>&1
      local rc=$?
      p50=$(tail -n 3 "$bl" | sed -n 's/.*p50 \([0-9.e+-]*\).*/\1/p' | tail -1)
      [ -z "$p50" ] && p50="failed (rc $rc, bench.log)"
    else
      p50="not run (budget)"
    fi
    printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$label" "$batch" "$dir" "$p50" "$iters" "$warm" >>"$rows"
  done
  if enough 240 40; then
    echo "== torch eager / onnxruntime" >>"$bl"
    PYTHONUNBUFFERED=1 timeout -k 5 "$(allot 240)" python3 - "$rows" "$models" "$OUT/bench.json" \
      <<'PY' >>"$bl" 2>&1
# PyTorch eager (the modules bench/gen_torch_bench_models.py exports) and ONNX Runtime's CUDA
# provider on the same GPU: medians after warm-up. torch: CUDA events around each forward with
# inputs already on the device, and wall time with host inputs and outputs (as onyx's
# Session::run, which `onyx bench` times); ORT: host in / host out.
import json, os, statistics, sys, time
sys.path.insert(0, "bench")
rows_tsv, models, out_json = sys.argv[1:4]
res = {"rows": []}
try:
    import torch
    import gen_torch_bench_models as g
except Exception as e:  # noqa: BLE001
    torch = None
    res["torch_error"] = repr(e)
if torch is not None:
    facts = {"torch": lambda: torch.__version__, "torch_cuda": lambda: torch.version.cuda,
             "torch_cudnn": lambda: torch.backends.cudnn.version(),
             "tf32_matmul": lambda: torch.backends.cuda.matmul.allow_tf32,
             "tf32_cudnn": lambda: torch.backends.cudnn.allow_tf32,
             "device": lambda: torch.cuda.get_device_name(0)}
    for k, f in facts.items():
        try:
            res[k] = f()
        except Exception as e:  # noqa: BLE001
            res[k] = "error: " + repr(e)[:200]
try:
    import onnxruntime as ort
    res["ort"] = ort.__version__
    res["ort_providers"] = ort.get_available_providers()
except Exception as e:  # noqa: BLE001
    ort = None
    res["ort"] = "not importable: " + repr(e)
has_ort_cuda = ort is not None and "CUDAExecutionProvider" in res.get("ort_providers", [])
print(json.dumps({k: v for k, v in res.items() if k != "rows"}), flush=True)

built = {}
for line in open(rows_tsv):
    label, batch, dirname, onyx_ms, iters, warm = line.rstrip("\n").split("\t")
    batch, iters, warm = int(batch), int(iters), int(warm)
    row = {"model": label, "batch": batch, "graph": dirname, "onyx_ms": onyx_ms}
    key = {"resnet50": "torch_resnet50", "bert_base": "torch_bert_base", "gpt2_small": "torch_gpt2_small"}[label]
    if torch is not None:
        try:
            if key not in built:
                torch.manual_seed(0)
                with torch.device("cuda"):
                    model, feeds, shapes, _ = g.MODELS[key]()
                built[key] = (model.eval(), feeds, shapes)
            model, feeds, shapes = built[key]
            inputs = []
            for n, shape in shapes.items():
                shape = [batch] + list(shape[1:])
                kind = feeds[n]["kind"]
                if kind == "normal":
                    inputs.append(torch.randn(*shape))
                elif kind == "ids":
                    inputs.append(torch.randint(0, feeds[n]["high"], shape))
                else:
                    inputs.append(torch.ones(*shape, dtype=torch.int64))
            dev = [t.cuda() for t in inputs]
            with torch.inference_mode(), torch.device("cuda"):
                for _ in range(max(warm, 3)):
                    model(*dev)
                torch.cuda.synchronize()
                ms = []
                for _ in range(iters):
                    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    a.record()
                    model(*dev)
                    b.record()
                    b.synchronize()
                    ms.append(a.elapsed_time(b))
                host = []
                for _ in range(iters):
                    t0 = time.perf_counter()
                    model(*[t.cuda() for t in inputs]).cpu()
                    host.append((time.perf_counter() - t0) * 1e3)
            row["torch_ms"] = statistics.median(ms)
            row["torch_host_ms"] = statistics.median(host)
        except Exception as e:  # noqa: BLE001
            row["torch_error"] = repr(e)[:300]
    if has_ort_cuda and dirname:
        try:
            import numpy as np
            sess = ort.InferenceSession(os.path.join(models, dirname, "model.onnx"),
                                        providers=["CUDAExecutionProvider"])
            feed = {}
            for i in sess.get_inputs():
                shape = [batch if not isinstance(d, int) else d for d in i.shape]
                if "int64" in i.type:
                    feed[i.name] = (np.ones(shape, np.int64) if "mask" in i.name
                                    else np.random.randint(0, 1000, shape).astype(np.int64))
                else:
                    feed[i.name] = np.random.randn(*shape).astype(np.float32)
            for _ in range(max(warm, 3)):
                sess.run(None, feed)
            t = []
            for _ in range(iters):
                t0 = time.perf_counter()
                sess.run(None, feed)
                t.append((time.perf_counter() - t0) * 1e3)
            row["ort_ms"] = statistics.median(t)
        except Exception as e:  # noqa: BLE001
            row["ort_error"] = repr(e)[:300]
    print(json.dumps(row), flush=True)
    res["rows"].append(row)
json.dump(res, open(out_json, "w"), indent=1)
PY
    note "torch/ORT timing: rc $?"
  else
    note "torch/ORT timing: not run (budget)"
  fi

  # The table (from bench.json, or the onyx column alone).
  {
    echo
    python3 - "$OUT/bench.json" "$rows" <<'PY' 2>&1 || cat "$rows"
import json, os, sys
path, rows_tsv = sys.argv[1:3]
res = json.load(open(path)) if os.path.exists(path) else {"rows": []}
rows = res["rows"]
if not rows:  # torch never ran: the onyx column only
    for line in open(rows_tsv):
        label, batch, graph, onyx, _, _ = line.rstrip("\n").split("\t")
        rows.append({"model": label, "batch": int(batch), "graph": graph, "onyx_ms": onyx})
def num(v):
    try:
        return float(v)
    except (TypeError, ValueError):
        return None
def fmt(v):
    return f"{v:.4g}" if isinstance(v, float) else (v or "-")
ort = res.get("ort", "?")
if "CUDAExecutionProvider" in res.get("ort_providers", []):
    ort_note = f"onnxruntime {ort} CUDAExecutionProvider, host in/out"
elif "ort_providers" in res:
    ort_note = f"not available: onnxruntime {ort} has no CUDAExecutionProvider ({', '.join(res['ort_providers'])})"
else:
    ort_note = f"not available: onnxruntime {ort}"
print(f"## onyx CUDA vs PyTorch eager, {res.get('device', 'GPU')}, median ms "
      f"(torch {res.get('torch', '?')}, TF32 matmul {res.get('tf32_matmul', '?')} / cuDNN {res.get('tf32_cudnn', '?')})")
print("onyx: `onyx bench --provider cuda`, host inputs and outputs included; torch: CUDA events, inputs on the")
print("device; torch host-io: wall time with host inputs and outputs, as onyx; ratio = onyx / torch host-io")
print(f"ORT GPU: {ort_note}")
print()
print("| model | batch | graph | onyx CUDA | torch eager | torch host-io | onyx/torch host-io | onyx/torch | ORT GPU |")
print("|---|---|---|---|---|---|---|---|---|")
for r in rows:
    o, t, th = num(r.get("onyx_ms")), r.get("torch_ms"), r.get("torch_host_ms")
    ratio_h = f"{o / th:.2f}" if o and th else "-"
    ratio = f"{o / t:.2f}" if o and t else "-"
    torch_cell = fmt(t) if t else ("error" if r.get("torch_error") else "-")
    ort_cell = fmt(r.get("ort_ms")) if r.get("ort_ms") else ("error" if r.get("ort_error") else "n/a")
    print(f"| {r['model']} | {r['batch']} | {r.get('graph') or '-'} | {fmt(o) if o else r.get('onyx_ms')} | "
          f"{torch_cell} | {fmt(th) if th else '-'} | {ratio_h} | {ratio} | {ort_cell} |")
if res.get("torch_error"):
    print(f"torch: {res['torch_error'][:300]}")
for r in rows:
    for k in ("torch_error", "ort_error"):
        if r.get(k):
            print(f"{r['model']} b{r['batch']} {k}: {r[k]}")
PY
    echo
    echo "gpu_check: done in $((SECONDS - t0))s; logs under \$OUT: $(cd "$OUT" && echo *)"
  } | tee -a "$summary"
}

# "N passed, N failed, N skipped" from a gtest log.
gtest_counts() {
  local p f s
  p=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
  f=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
  s=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' "$1" | tail -1)
  if [ -z "$p$f$s" ]; then
    echo "no gtest summary (crashed or timed out: $(tail -n 2 "$1" | tr '\n' ' ' | cut -c1-200))"
  else
    echo "${p:-0} passed, ${f:-0} failed, ${s:-0} skipped"
  fi
}

case "${1:-}" in
  prepare) shift; prepare "$@" ;;
  device) device ;;
  closure) shift; closure "$@" ;;
  *) sed -n '2,12p' "$0"; exit 2 ;;
esac
