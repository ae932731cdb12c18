// Python objects <-> onyx Tensors. Views both ways: DLPack in (graph/dlpack.h), numpy arrays
// over the Tensor's storage out.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "graph/dlpack.h"
#include "graph/onnx_io.h"

namespace onyx::py {

using namespace nb::literals;

namespace {

/// numpy, imported once and kept for the life of the process (a released handle: no
/// destructor runs against a finalizing interpreter).
nb::handle numpy() {
  static nb::handle np = nb::module_::import_("numpy").release();
  return np;
}

bool is_numpy_array(nb::handle o) {
  static nb::handle ndarray = nb::object(numpy().attr("ndarray")).release();
  return PyObject_IsInstance(o.ptr(), ndarray.ptr()) == 1;
}

/// numpy str/bytes/object arrays become string tensors (copied: onyx holds std::string).
Tensor string_tensor(nb::handle array, const std::string& what) {
  Shape shape = nb::cast<Shape>(array.attr("shape"));
  Tensor t = Tensor::empty(DataType::String, shape);
  nb::list items = nb::list(array.attr("reshape")(-1).attr("tolist")());
  auto* out = t.data<std::string>();
  for (size_t i = 0; i < items.size(); ++i) {
    nb::handle item = items[i];
    if (PyBytes_Check(item.ptr()))
      out[i] = std::string(PyBytes_AS_STRING(item.ptr()), PyBytes_GET_SIZE(item.ptr()));
    else if (PyUnicode_Check(item.ptr()))
      out[i] = nb::cast<std::string>(item);
    else
      ONYX_THROW("[python] {}: a string tensor's elements must be str or bytes, element {} is {}",
                 what, i, nb::cast<std::string>(nb::str(item.type())));
  }
  return t;
}

nb::object string_array(const Tensor& t) {
  const auto* s = t.data<std::string>();
  nb::list items;
  for (int64_t i = 0; i < t.numel(); ++i) items.append(nb::str(s[i].data(), s[i].size()));
  nb::object arr = numpy().attr("array")(items, "dtype"_a = numpy().attr("object_"));
  return arr.attr("reshape")(nb::cast(t.shape()));
}

}  // namespace

Tensor to_tensor(nb::handle obj, const std::string& what, Convert convert) {
  if (nb::isinstance<Tensor>(obj)) return nb::cast<Tensor>(obj);
  nb::object o = nb::borrow(obj);
  // torch refuses to export a tensor that requires grad (a Parameter); onyx only reads it here,
  // and the caller's autograd (onyx.torch) accounts for the gradient.
  if (nb::hasattr(o, "requires_grad") && nb::hasattr(o, "detach") &&
      nb::cast<bool>(o.attr("requires_grad")))
    o = o.attr("detach")();
  const bool may_copy = convert == Convert::CopyIfNeeded;
  if (may_copy) {
    if (!nb::hasattr(o, "__dlpack__")) o = numpy().attr("asarray")(o);  // lists, scalars
    if (is_numpy_array(o)) {
      const auto kind = nb::cast<std::string>(o.attr("dtype").attr("kind"));
      if (kind == "U" || kind == "S" || kind == "O") return string_tensor(o, what);
      // numpy exports read-only arrays only through DLPack 1.0's read-only flag, which the
      // unversioned protocol here lacks; onyx never writes a feed, so a copy is safe.
      if (!nb::cast<bool>(o.attr("flags").attr("writeable"))) o = o.attr("copy")();
    }
  } else if (!nb::hasattr(o, "__dlpack__")) {
    throw nb::type_error(("[python] " + what +
                          ": expected an onyx.Tensor or an object with __dlpack__ (numpy array, "
                          "torch tensor), found " + nb::cast<std::string>(nb::str(o.type())))
                             .c_str());
  }
  nb::object capsule = o.attr("__dlpack__")();
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
  if (managed == nullptr) {
    PyErr_Clear();
    ONYX_THROW("[python] {}: __dlpack__() did not return a 'dltensor' capsule", what);
  }
  Tensor t;
  try {
    t = from_dlpack(managed, {.copy_if_strided = convert != Convert::ViewOnly});
  } catch (const Error& e) {
    throw Error(fmt::format("{} ({})", e.what(), what));
  }
  // Consumed: the producer's capsule destructor now leaves the tensor to onyx's storage.
  PyCapsule_SetName(capsule.ptr(), "used_dltensor");
  return t;
}

nb::object numpy_dtype(DataType dtype) {
  switch (dtype) {
    case DataType::Float: return numpy().attr("dtype")("float32");
    case DataType::Double: return numpy().attr("dtype")("float64");
    case DataType::Float16: return numpy().attr("dtype")("float16");
    case DataType::Int8: return numpy().attr("dtype")("int8");
    case DataType::Int16: return numpy().attr("dtype")("int16");
    case DataType::Int32: return numpy().attr("dtype")("int32");
    case DataType::Int64: return numpy().attr("dtype")("int64");
    case DataType::UInt8: return numpy().attr("dtype")("uint8");
    case DataType::UInt16: return numpy().attr("dtype")("uint16");
    case DataType::UInt32: return numpy().attr("dtype")("uint32");
    case DataType::UInt64: return numpy().attr("dtype")("uint64");
    case DataType::Bool: return numpy().attr("dtype")("bool");
    case DataType::String: return numpy().attr("dtype")("object");
    default: break;
  }
  // Same bits as ONNX, one element per byte or two: ml_dtypes (which onnx depends on).
  const char* name = nullptr;
  switch (dtype) {
    case DataType::BFloat16: name = "bfloat16"; break;
    case DataType::Float8E4M3FN: name = "float8_e4m3fn"; break;
    case DataType::Float8E4M3FNUZ: name = "float8_e4m3fnuz"; break;
    case DataType::Float8E5M2: name = "float8_e5m2"; break;
    case DataType::Float8E5M2FNUZ: name = "float8_e5m2fnuz"; break;
    default:
      ONYX_THROW("[python] no numpy dtype for onyx dtype {} (numpy arrays cover float16/32/64, "
                 "(u)int8..64, bool, string, and bfloat16/float8 through ml_dtypes)",
                 dtype_name(dtype));
  }
  nb::object ml;
  try {
    ml = nb::module_::import_("ml_dtypes");
  } catch (const nb::python_error&) {
    ONYX_THROW("[python] numpy has no {} dtype and ml_dtypes is not installed (pip install "
               "ml_dtypes, or view the tensor with torch.from_dlpack)",
               dtype_name(dtype));
  }
  return numpy().attr("dtype")(ml.attr(name));
}

nb::object to_numpy(const Tensor& t) {
  ONYX_CHECK(t.defined() && t.storage(), "[python] cannot make a numpy array of an empty Tensor");
  ONYX_CHECK(t.device().type == DeviceType::CPU, "[python] numpy arrays view CPU memory; this "
             "tensor is on {}", t.device().str());
  if (t.dtype() == DataType::String) return string_array(t);
  const nb::object dtype = numpy_dtype(t.dtype());  // refuses what numpy cannot hold
  // Types numpy knows natively go straight through; the ml_dtypes ones are made as unsigned
  // integers of their width, then viewed as the ml_dtypes type.
  const bool native = t.dtype() != DataType::BFloat16 && !is_float8(t.dtype());
  nb::dlpack::dtype dl{};
  if (native) {
    const DLDataType d = to_dlpack_dtype(t.dtype());
    dl = {d.code, d.bits, d.lanes};
  } else {
    dl = {static_cast<uint8_t>(nb::dlpack::dtype_code::UInt),
          static_cast<uint8_t>(dtype_size(t.dtype()) * 8), 1};
  }
  std::vector<size_t> shape(t.shape().begin(), t.shape().end());
  auto* keep = new Tensor(t);
  nb::capsule owner(keep, [](void* p) noexcept { delete static_cast<Tensor*>(p); });
  nb::ndarray<nb::numpy> array(keep->raw(), shape.size(), shape.data(), owner, nullptr, dl);
  nb::object out = array.cast();
  return native ? out : out.attr("view")(dtype);
}

std::unique_ptr<Model> load_model_arg(nb::handle model, bool map_external_data) {
  if (PyBytes_Check(model.ptr()))
    return load_model_from_bytes(PyBytes_AS_STRING(model.ptr()),
                                 static_cast<size_t>(PyBytes_GET_SIZE(model.ptr())));
  if (PyByteArray_Check(model.ptr()))
    return load_model_from_bytes(PyByteArray_AS_STRING(model.ptr()),
                                 static_cast<size_t>(PyByteArray_GET_SIZE(model.ptr())));
  nb::object path;
  try {
    path = nb::module_::import_("os").attr("fspath")(model);
  } catch (const nb::python_error&) {
    throw nb::type_error(("[python] a model is a path (str or os.PathLike) or serialized bytes, "
                          "found " + nb::cast<std::string>(nb::str(model.type())))
                             .c_str());
  }
  if (!PyUnicode_Check(path.ptr()))  // os.fspath(b"...") is bytes: a path in bytes
    path = path.attr("decode")();
  LoadOptions opts;
  opts.map_external_data = map_external_data;
  return load_model(nb::cast<std::string>(path), opts);
}

std::string ort_type_string(const ValueType& type) {
  switch (type.kind) {
    case ValueType::Kind::Tensor: return "tensor(" + dtype_name(type.elem) + ")";
    case ValueType::Kind::SparseTensor: return "sparse_tensor(" + dtype_name(type.elem) + ")";
    case ValueType::Kind::Sequence:
      return "seq(" + (type.inner ? ort_type_string(*type.inner) : std::string("unknown")) + ")";
    case ValueType::Kind::Optional:
      return "optional(" + (type.inner ? ort_type_string(*type.inner) : std::string("unknown")) + ")";
    case ValueType::Kind::Map:
      return "map(" + dtype_name(type.key) + "," +
             (type.inner ? ort_type_string(*type.inner) : std::string("unknown")) + ")";
    case ValueType::Kind::Unknown: break;
  }
  return "unknown";
}

}  // namespace onyx::py
