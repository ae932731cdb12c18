# The CUDA provider (kernels/cuda/): built whenever nvcc, cuBLASLt and cuDNN are found, so
# CUDA code compiles on every CI run and cannot rot; its tests skip without a GPU.
# ONYX_WITH_CUDA=OFF (or no toolkit, as on a fresh Debian machine) builds kernels/cuda/no_cuda.cpp
# instead: asking for the provider is then a clear error. Sanitizer and fuzz builds leave CUDA
# out: nvcc takes none of their flags, and no GPU runs them here.
include(CheckLanguage)
set(_cuda_default OFF)
if(NOT ONYX_SANITIZE AND NOT ONYX_FUZZ)
  if(NOT CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX} AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  check_language(CUDA)
  find_package(CUDAToolkit QUIET)
  find_library(ONYX_CUDNN_LIBRARY cudnn HINTS ${CUDAToolkit_LIBRARY_DIR})
  find_path(ONYX_CUDNN_INCLUDE_DIR cudnn.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
  if(CMAKE_CUDA_COMPILER AND CUDAToolkit_FOUND AND TARGET CUDA::cublasLt AND ONYX_CUDNN_LIBRARY
     AND ONYX_CUDNN_INCLUDE_DIR)
    set(_cuda_default ON)
  endif()
endif()
option(ONYX_WITH_CUDA "Build the CUDA execution provider (needs nvcc, cuBLASLt and cuDNN)" ${_cuda_default})
if(ONYX_WITH_CUDA)
  if(NOT CMAKE_CUDA_ARCHITECTURES)
    # A100 (80) and H100/H200 (90); override with -DCMAKE_CUDA_ARCHITECTURES=...
    set(CMAKE_CUDA_ARCHITECTURES 80 90)
  endif()
  # C++17 in device code: CMake 3.25 knows no CUDA20 dialect for nvcc 13; *.cu files include
  # only kernels/cuda/launch headers, never the C++20 graph headers.
  set(CMAKE_CUDA_STANDARD 17)
  set(CMAKE_CUDA_STANDARD_REQUIRED ON)
  # One CUDA runtime in the process: the NCCL communicator links the shared one too.
  set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
  if(CCACHE_PROGRAM)
    set(CMAKE_CUDA_COMPILER_LAUNCHER ${CCACHE_PROGRAM})
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
  if(NOT ONYX_CUDNN_LIBRARY OR NOT ONYX_CUDNN_INCLUDE_DIR)
    message(FATAL_ERROR "ONYX_WITH_CUDA is ON but cuDNN was not found (ONYX_CUDNN_LIBRARY, ONYX_CUDNN_INCLUDE_DIR)")
  endif()
  message(STATUS "onyx: CUDA provider ON (nvcc ${CMAKE_CUDA_COMPILER_VERSION}, architectures ${CMAKE_CUDA_ARCHITECTURES})")
else()
  message(STATUS "onyx: CUDA provider OFF (no nvcc/cuBLASLt/cuDNN, or ONYX_WITH_CUDA=OFF)")
endif()
