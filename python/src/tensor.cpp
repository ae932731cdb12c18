// onyx.Tensor and onyx.from_dlpack: the DLPack protocol on both sides, so numpy, torch and
// onyx share memory without copies.
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include "bindings.h"
#include "graph/dlpack.h"

namespace onyx::py {

using namespace nb::literals;

namespace {

/// DLPack 1.0's versioned managed tensor, which Debian's 0.6 header does not declare (the
/// layout is fixed by the DLPack ABI; DLTensor itself did not change). numpy imports an
/// unversioned capsule read-only, so a writable view for numpy needs this one.
struct DLPackVersion {
  uint32_t major, minor;
};
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};
constexpr uint64_t kDLPackFlagIsCopied = 1ull << 1;

/// Runs the deleter of a capsule nobody consumed (a consumer renames it "used_dltensor" or
/// "used_dltensor_versioned").
void legacy_capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor")) return;
  auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule, "dltensor"));
  if (managed && managed->deleter) managed->deleter(managed);
}

void versioned_capsule_destructor(PyObject* capsule) {
  if (!PyCapsule_IsValid(capsule, "dltensor_versioned")) return;
  auto* managed = static_cast<DLManagedTensorVersioned*>(
      PyCapsule_GetPointer(capsule, "dltensor_versioned"));
  if (managed && managed->deleter) managed->deleter(managed);
}

/// The versioned form of graph/dlpack.h's export: it wraps the unversioned one, whose
/// deleter (dropping the storage reference) runs when the consumer is done.
DLManagedTensorVersioned* versioned(DLManagedTensor* legacy, bool copied) {
  auto* v = new DLManagedTensorVersioned{};
  v->version = {1, 0};
  v->manager_ctx = legacy;
  v->deleter = [](DLManagedTensorVersioned* self) {
    auto* inner = static_cast<DLManagedTensor*>(self->manager_ctx);
    inner->deleter(inner);
    delete self;
  };
  v->flags = copied ? kDLPackFlagIsCopied : 0;
  v->dl_tensor = legacy->dl_tensor;
  return v;
}

nb::object dlpack_capsule(const Tensor& t, bool versioned_abi, bool copied) {
  DLManagedTensor* managed = to_dlpack(t);
  PyObject* capsule = nullptr;
  if (versioned_abi) {
    DLManagedTensorVersioned* v = versioned(managed, copied);
    capsule = PyCapsule_New(v, "dltensor_versioned", versioned_capsule_destructor);
    if (!capsule) v->deleter(v);
  } else {
    capsule = PyCapsule_New(managed, "dltensor", legacy_capsule_destructor);
    if (!capsule) managed->deleter(managed);
  }
  if (!capsule) throw nb::python_error();
  return nb::steal(capsule);
}

/// The array API's __dlpack__: the versioned capsule when the consumer takes DLPack >= 1.0
/// (max_version), else the unversioned one; a view of the tensor unless copy=True.
nb::object tensor_dlpack(const Tensor& t, nb::handle stream, nb::handle max_version,
                         nb::handle dl_device, std::optional<bool> copy) {
  if (!dl_device.is_none()) {
    auto device = nb::cast<std::pair<int, int>>(dl_device);
    if (device.first != kDLCPU) {
      PyErr_Format(PyExc_BufferError,
                   "onyx tensors live on the CPU (device (%d, 0)); cannot export to device "
                   "(%d, %d)",
                   static_cast<int>(kDLCPU), device.first, device.second);
      throw nb::python_error();
    }
  }
  const bool versioned_abi =
      !max_version.is_none() && nb::cast<std::pair<int, int>>(max_version).first >= 1;
  const bool copied = copy.value_or(false);
  return dlpack_capsule(copied ? t.clone() : t, versioned_abi, copied);
}

std::string tensor_repr(const Tensor& t) {
  if (!t.defined()) return "onyx.Tensor(undefined)";
  return fmt::format("onyx.Tensor({}, shape={})", dtype_name(t.dtype()), shape_str(t.shape()));
}

nb::object tensor_array(const Tensor& t, nb::handle dtype, std::optional<bool> copy) {
  nb::object array = to_numpy(t);
  if (!dtype.is_none()) array = array.attr("astype")(dtype, "copy"_a = copy.value_or(false));
  else if (copy.value_or(false)) array = array.attr("copy")();
  return array;
}

}  // namespace

void bind_tensor(nb::module_& m) {
  nb::class_<Tensor>(m, "Tensor",
                      "An onyx tensor: dtype, shape and shared CPU memory. numpy(), __array__ "
                      "and __dlpack__ view that memory without copying.")
      .def_prop_ro("shape", [](const Tensor& t) { return nb::tuple(nb::cast(t.shape())); })
      .def_prop_ro("dtype", [](const Tensor& t) { return numpy_dtype(t.dtype()); },
                   "The numpy dtype (ml_dtypes' for bfloat16 and float8).")
      .def_prop_ro("ndim", &Tensor::rank)
      .def_prop_ro("size", &Tensor::numel)
      .def("numpy", &to_numpy,
           "A numpy array viewing this tensor's memory (no copy); it keeps the memory alive.")
      .def("__array__", &tensor_array, "dtype"_a = nb::none(), "copy"_a = nb::none())
      .def("__dlpack__", &tensor_dlpack, nb::kw_only(), "stream"_a = nb::none(),
           "max_version"_a = nb::none(), "dl_device"_a = nb::none(), "copy"_a = nb::none(),
           "A DLPack capsule viewing this tensor (a copy with copy=True): DLPack 1.0's "
           "versioned capsule when max_version allows it, else the unversioned one.")
      .def("__dlpack_device__", [](const Tensor&) { return nb::make_tuple(int(kDLCPU), 0); })
      .def("__repr__", &tensor_repr);

  m.def(
      "from_dlpack",
      [](nb::handle obj, bool copy_if_strided) {
        return to_tensor(obj, "from_dlpack",
                         copy_if_strided ? Convert::CopyStrided : Convert::ViewOnly);
      },
      "obj"_a, nb::kw_only(), "copy_if_strided"_a = false,
      "An onyx.Tensor viewing obj's memory (numpy array, torch tensor, any __dlpack__ "
      "producer) without a copy. A non-row-major view (a transpose, a strided slice) is an "
      "onyx.Error unless copy_if_strided=True, which copies it row-major (the result then "
      "no longer shares memory).");
}

}  // namespace onyx::py
