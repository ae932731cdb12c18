"""onyx.InferenceSession with ONNX Runtime's interface, so a program switches runtimes by
changing its import:

    import onyx as ort            # instead of: import onnxruntime as ort
    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    (y,) = sess.run(None, {"x": x})

Feeds are viewed, not copied (DLPack), when they are C-contiguous writable arrays; outputs are
numpy arrays viewing onyx's buffers. Errors raise onyx.Error, a RuntimeError like ONNX
Runtime's.
"""

import enum
import time
import warnings

from . import _onyx

CPU_PROVIDER = "CPUExecutionProvider"
CUDA_PROVIDER = "CUDAExecutionProvider"
_NATIVE_NAMES = {CUDA_PROVIDER: "cuda", CPU_PROVIDER: "cpu"}


def get_available_providers():
    """The execution providers usable here (ONNX Runtime's function of that name):
    CUDAExecutionProvider when this build has it and the machine a CUDA device, then CPU."""
    native = _onyx._available_providers()
    return [name for name, n in _NATIVE_NAMES.items() if n in native]


def get_device():
    return "CPU"


class GraphOptimizationLevel(enum.IntEnum):
    """ONNX Runtime's levels, mapped onto onyx's: none, basic, extended, all."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


_OPT_LEVELS = {
    GraphOptimizationLevel.ORT_DISABLE_ALL: "none",
    GraphOptimizationLevel.ORT_ENABLE_BASIC: "basic",
    GraphOptimizationLevel.ORT_ENABLE_EXTENDED: "extended",
    # ORT's layout level is its NCHWc transformer: onyx's "all" level is the one with layouts.
    GraphOptimizationLevel.ORT_ENABLE_LAYOUT: "all",
    GraphOptimizationLevel.ORT_ENABLE_ALL: "all",
}

# ORT's severities: 0 verbose, 1 info, 2 warning, 3 error, 4 fatal; -1 its default (warning).
_LOG_LEVELS = {-1: "warn", 0: "trace", 1: "info", 2: "warn", 3: "error", 4: "critical"}


class SessionOptions:
    """The subset of onnxruntime.SessionOptions onyx acts on, with ORT's names and defaults.

    inter_op_num_threads and execution_mode are accepted so ORT code runs unchanged, and have
    no effect: onyx runs one node at a time, each with intra_op_num_threads threads.
    """

    def __init__(self):
        self.intra_op_num_threads = 0  # 0: one per core
        self.inter_op_num_threads = 0
        self.execution_mode = None
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.enable_profiling = False
        self.profile_file_prefix = "onyx_profile"
        self.log_severity_level = -1
        self.optimized_model_filepath = ""
        # onyx's own: "bf16"/"fp16" run matrix products and convolutions in that format
        # (weights converted once), softmax/norms/reductions in float32; I/O stays float32.
        self.precision = "fp32"
        # onyx's own: False keeps direct convolutions everywhere (3x3 stride-1 ones otherwise
        # run by Winograd's algorithm on AVX-512 CPUs: faster, within ~1e-5 of direct).
        self.winograd_convolutions = True
        # onyx's own: False packs constant weights for the CPU's kernels in the first run that
        # needs them instead of at creation (ORT's "session.disable_prepacking").
        self.prepack_weights = True
        # onyx's own name for ORT's "session.set_denormal_as_zero": denormal floats read and
        # written as zero during runs (on Intel CPUs each operation on one takes ~100x its time).
        self.flush_denormals = False
        # onyx's own: weights in external data (torch.onnx's default export) stay in the file's
        # copy-on-write mapping instead of being copied (as ONNX Runtime maps them): no second
        # copy, a faster first result. A run on a session whose file was since truncated or
        # rewritten raises onyx.Error; False copies them instead.
        self.map_external_data = True
        self._config = {}

    def add_session_config_entry(self, key, value):
        """ORT's session configuration entries; onyx acts on "session.set_denormal_as_zero"
        and "session.disable_prepacking" ("0" or "1") and keeps the others for
        get_session_config_entry, as ORT keeps the keys it does not know."""
        key, value = str(key), str(value)
        if key in ("session.set_denormal_as_zero", "session.disable_prepacking"):
            if value not in ("0", "1"):
                raise _onyx.Error(f'[python] session config "{key}" takes "0" or "1", got "{value}"')
            if key == "session.set_denormal_as_zero":
                self.flush_denormals = value == "1"
            else:
                self.prepack_weights = value == "0"
        self._config[key] = value

    def get_session_config_entry(self, key):
        if str(key) not in self._config:
            raise _onyx.Error(f'[python] no session config entry "{key}"')
        return self._config[str(key)]

    def _onyx_kwargs(self):
        level = GraphOptimizationLevel(int(self.graph_optimization_level))
        if self.log_severity_level not in _LOG_LEVELS:
            raise _onyx.Error(
                f"[python] log_severity_level {self.log_severity_level}: expected -1 or 0 "
                "(verbose) .. 4 (fatal)")
        return dict(threads=int(self.intra_op_num_threads), opt_level=_OPT_LEVELS[level],
                    profiling=bool(self.enable_profiling),
                    profile_path=f"{self.profile_file_prefix}_"
                                 f"{time.strftime('%Y-%m-%d_%H-%M-%S')}.json",
                    log_level=_LOG_LEVELS[self.log_severity_level],
                    precision=str(self.precision),
                    winograd=bool(self.winograd_convolutions),
                    prepack=bool(self.prepack_weights),
                    flush_denormals=bool(self.flush_denormals),
                    map_external_data=bool(self.map_external_data))


class RunOptions:
    """Per-run options. seed: draws of random ops (Dropout in training mode, Random*) for this
    run; the same seed gives the same draws."""

    def __init__(self, seed=None):
        self.seed = seed


class NodeArg:
    """A graph input or output as ONNX Runtime describes it: shape has ints for fixed dims,
    strings for symbolic ones and None for unknown ones."""

    def __init__(self, name, type, shape):  # noqa: A002 (ORT's attribute name)
        self.name = name
        self.type = type
        self.shape = shape

    def __repr__(self):
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"

    __str__ = __repr__


_UNSET_MODEL_VERSION = 2**63 - 1


class ModelMetadata:
    """onnxruntime.ModelMetadata: the model's producer, names, docs and metadata_props."""

    def __init__(self, fields):
        self.producer_name = fields["producer_name"]
        self.graph_name = fields["graph_name"]
        self.graph_description = fields["graph_description"]
        self.domain = fields["domain"]
        self.description = fields["description"]
        # ORT reports a model_version the file does not set as INT64_MAX. onyx keeps 0 for
        # both "unset" and "set to 0", and reads 0 as unset, the usual case (exporters omit it).
        self.version = fields["version"] if fields["version"] != 0 else _UNSET_MODEL_VERSION
        self.custom_metadata_map = fields["custom_metadata_map"]
        self.producer_version = fields["producer_version"]  # not in ORT's; onyx keeps it


def _select_providers(providers, provider_options):
    """ORT's rules: providers are names or (name, options) pairs; names this build lacks are
    skipped with a warning, and the CPU provider is the fallback."""
    if providers is None:
        return [CPU_PROVIDER], [{}]
    if provider_options is not None and len(provider_options) != len(providers):
        raise ValueError("'providers' and 'provider_options' should be the same length if "
                         "both are given.")
    names, options = [], []
    for i, entry in enumerate(providers):
        if isinstance(entry, tuple):
            name, opts = entry
        else:
            name, opts = entry, provider_options[i] if provider_options is not None else {}
        if name not in get_available_providers():
            warnings.warn(f"Specified provider '{name}' is not in available provider names. "
                          f"Available providers: '{', '.join(get_available_providers())}'",
                          stacklevel=3)
            continue
        names.append(name)
        options.append(dict(opts))
    if CPU_PROVIDER not in names:  # the fallback of every session, as in ONNX Runtime
        names.append(CPU_PROVIDER)
        options.append({})
    return names, options


class InferenceSession:
    """Loads, optimizes and compiles an ONNX model (a path or its serialized bytes) once;
    run() then executes it, from any number of threads at once."""

    def __init__(self, path_or_bytes, sess_options=None, providers=None, provider_options=None,
                 **kwargs):
        self._sess_options = sess_options if sess_options is not None else SessionOptions()
        self._providers, self._provider_options = _select_providers(providers, provider_options)
        device_id = next((int(o.get("device_id", 0)) for n, o in
                          zip(self._providers, self._provider_options) if n == CUDA_PROVIDER), 0)
        self._sess = _onyx._Session(path_or_bytes, **self._sess_options._onyx_kwargs(),
                                    providers=[_NATIVE_NAMES[n] for n in self._providers],
                                    device_id=device_id)
        if self._sess_options.optimized_model_filepath:
            self._sess.save_optimized_model(str(self._sess_options.optimized_model_filepath))
        self._inputs = [NodeArg(*io) for io in self._sess.inputs()]
        self._outputs = [NodeArg(*io) for io in self._sess.outputs()]
        self._meta = ModelMetadata(self._sess.metadata())

    def run(self, output_names, input_feed, run_options=None):
        """Returns the outputs named in output_names (all when None or empty), in that order,
        as numpy arrays. input_feed maps input names to arrays (or anything numpy.asarray or
        DLPack takes)."""
        seed = getattr(run_options, "seed", None) if run_options is not None else None
        return self._sess.run(list(output_names) if output_names else None, input_feed, seed)

    def get_inputs(self):
        return list(self._inputs)

    def get_outputs(self):
        return list(self._outputs)

    def get_modelmeta(self):
        return self._meta

    def get_providers(self):
        return list(self._providers)

    def get_provider_options(self):
        return {name: dict(opts) for name, opts in zip(self._providers, self._provider_options)}

    def get_session_options(self):
        return self._sess_options

    def end_profiling(self):
        """Writes the Chrome-trace profile (one event per node) and returns its path; "" when
        profiling is off, as in ONNX Runtime."""
        if not self._sess_options.enable_profiling:
            return ""
        return self._sess.end_profiling()
