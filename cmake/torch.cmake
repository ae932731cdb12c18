# libtorch for interop/ (the one layer that links it), taken from the PyTorch wheel installed
# in ONYX_PYTHON's environment. ONYX_TORCH: AUTO builds interop/ when
# `${ONYX_PYTHON} -c "import torch"` works, ON requires it (configuring fails with the reason),
# OFF never builds it. Sets ONYX_HAVE_TORCH and, when ON, the imported target onyx::libtorch
# (ONYX_LIBTORCH_ROOT: the wheel's torch/ folder, ONYX_LIBTORCH_VERSION).
#
# Why not find_package(Torch): the wheel's TorchConfig.cmake is the CUDA build's. On a machine
# with the CUDA toolkit it configures nvcc and arch flags, and its targets put libnvrtc,
# libtorch_cuda, libc10_cuda, protobuf::libprotobuf (the system one, not what libtorch was built
# with) and MKL on every link line. interop/ needs the CPU libraries and headers only:
# libtorch_cpu.so, libc10.so and include/ (the CUDA runtime libtorch_cpu.so itself needs is found
# through its own RPATH into the wheel's nvidia/ packages). Not libtorch.so: it is an empty shim
# whose one job is to pull in libtorch_cuda.so, which needs the wheel's NCCL, newer than the CUDA
# toolkit's that onyx's NCCL communicator links (the link fails on NCCL symbols the toolkit's lacks).
# A consumer may still use find_package(Torch) for its own code, linking its torch_cpu target
# (examples/torch_consumer).
#
# The wheel ships its own libgomp.so.1 beside libtorch, so CMake warns that the RPATH of a target
# linking both OpenMP and libtorch may resolve libgomp.so.1 there rather than in the compiler's
# folder. It may, and that is fine: one libgomp serves the process either way (same SONAME), and
# onyx, oneDNN and libtorch use only symbols both copies have (GOMP_4.0 / OMP_1.0 and older).
set(ONYX_TORCH AUTO CACHE STRING "Build interop/ (libtorch): AUTO when ONYX_PYTHON imports torch, ON, OFF")
set_property(CACHE ONYX_TORCH PROPERTY STRINGS AUTO ON OFF)
string(TOUPPER "${ONYX_TORCH}" _onyx_torch_mode)
if(NOT _onyx_torch_mode MATCHES "^(AUTO|ON|OFF)$")
  message(FATAL_ERROR "ONYX_TORCH must be AUTO, ON or OFF, not '${ONYX_TORCH}'")
endif()

set(ONYX_HAVE_TORCH OFF)

# Gives up on libtorch: an error when it was required, a note otherwise.
macro(_onyx_torch_unavailable why)
  if(_onyx_torch_mode STREQUAL "ON")
    message(FATAL_ERROR "ONYX_TORCH=ON but libtorch is unusable: ${why}")
  endif()
  message(STATUS "interop/ (libtorch) not built: ${why}")
  return()
endmacro()

if(_onyx_torch_mode STREQUAL "OFF")
  message(STATUS "interop/ (libtorch) not built: ONYX_TORCH=OFF")
  return()
endif()
if(NOT EXISTS "${ONYX_PYTHON}")
  _onyx_torch_unavailable("no Python at ONYX_PYTHON='${ONYX_PYTHON}'")
endif()
execute_process(
  COMMAND "${ONYX_PYTHON}" -c
          "import os, torch; print(os.path.dirname(torch.__file__)); print(torch.__version__); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
  RESULT_VARIABLE _rc OUTPUT_VARIABLE _out ERROR_VARIABLE _err OUTPUT_STRIP_TRAILING_WHITESPACE)
if(NOT _rc EQUAL 0)
  string(REGEX REPLACE "\n$" "" _err "${_err}")
  string(REGEX REPLACE ".*\n" "" _err "${_err}")  # the exception's last line
  _onyx_torch_unavailable("'${ONYX_PYTHON} -c \"import torch\"' failed: ${_err}")
endif()
string(REPLACE "\n" ";" _out "${_out}")
list(GET _out 0 _root)
list(GET _out 1 _version)
list(GET _out 2 _abi)
# libtorch's std::string and std::list follow this flag; ours are the C++11 ABI (the g++ default),
# and a mismatch links but crashes at the first string crossing the boundary.
if(NOT _abi EQUAL 1)
  _onyx_torch_unavailable("torch ${_version} was built with _GLIBCXX_USE_CXX11_ABI=0; onyx uses the C++11 ABI")
endif()
set(_libs)
foreach(_lib torch_cpu c10)
  set(_path "${_root}/lib/lib${_lib}.so")
  if(NOT EXISTS "${_path}")
    _onyx_torch_unavailable("torch ${_version} at ${_root} has no lib/lib${_lib}.so")
  endif()
  list(APPEND _libs "${_path}")
endforeach()
foreach(_header torch/csrc/api/include/torch/nn/module.h ATen/ATen.h)
  if(NOT EXISTS "${_root}/include/${_header}")
    _onyx_torch_unavailable("torch ${_version} at ${_root} has no include/${_header}")
  endif()
endforeach()

set(ONYX_HAVE_TORCH ON)
set(ONYX_LIBTORCH_ROOT "${_root}")
set(ONYX_LIBTORCH_VERSION "${_version}")
# Imported, so the include folders are -isystem (torch's headers stay out of -Werror) and the
# libraries are full paths (CMake adds their folder to the build RPATH; onyx_torch's install
# RPATH keeps it, see interop/CMakeLists.txt).
#
# FMT_HEADER_ONLY: the wheel bundles fmt 12 in include/fmt/, and its -isystem folder comes before
# /usr/include, so onyx's own `#include <fmt/format.h>` (graph/error.h) finds fmt 12 there in
# every file that sees torch's headers, while libfmt.so is Debian's fmt 9: a call into the
# compiled part (fmt::v12::vformat) would not link. Header-only, whichever fmt the include order
# picks is complete in itself (fmt versions live in distinct inline namespaces, so they coexist).
add_library(onyx::libtorch INTERFACE IMPORTED)
set_target_properties(onyx::libtorch PROPERTIES
  INTERFACE_INCLUDE_DIRECTORIES "${_root}/include;${_root}/include/torch/csrc/api/include"
  INTERFACE_COMPILE_DEFINITIONS FMT_HEADER_ONLY
  INTERFACE_LINK_LIBRARIES "${_libs}")
message(STATUS "interop/ (libtorch): torch ${_version} from ${_root}")
