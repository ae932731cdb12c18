# The installable library: `cmake --install build --prefix P` installs
#   P/lib/libonyx.so.<SOVERSION>     every layer the public API reaches, in one shared library
#   P/bin/onyx                       the command line
#   P/include/onyx/                  <onyx/onyx.h> and the public headers it includes
#   P/lib/cmake/onyx/                find_package(onyx CONFIG) -> onyx::onyx
#                                    find_package(onyx CONFIG COMPONENTS torch) -> onyx::torch
#   P/lib/libonyx_torch.so.<SOVERSION>, P/include/onyx/torch.h   the `torch` component, when
#                                    interop/ was built (cmake/torch.cmake)
#   P/lib/pkgconfig/onyx.pc          pkg-config --cflags --libs onyx
# The layers stay static libraries: the tests and the `onyx` CLI link them as before (so the
# installed CLI does not need libonyx.so); onyx_shared is built from their objects.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# Before 1.0 a minor release may change the ABI (the API passes std types and structs by
# value), so the SONAME and the package's compatibility follow major.minor until then.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(ONYX_SOVERSION ${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR})
  set(ONYX_VERSION_COMPATIBILITY SameMinorVersion)
else()
  set(ONYX_SOVERSION ${PROJECT_VERSION_MAJOR})
  set(ONYX_VERSION_COMPATIBILITY SameMajorVersion)
endif()

# libonyx.so: the layers under the public API (the CLI's launcher layer is not one of them).
set(ONYX_LIBRARY_LAYERS onyx_graph onyx_kernels onyx_inference onyx_autodiff onyx_optimizers
    onyx_distributed onyx_training)
add_library(onyx_shared SHARED ${PROJECT_SOURCE_DIR}/cmake/libonyx.cpp)
add_library(onyx::onyx ALIAS onyx_shared)
# Every object of every layer goes in, so the library holds the whole API whatever the one
# source references. The layers are linked too, for their third-party dependencies (private
# to the library); their archives add nothing, every symbol in them being defined already.
# (Whole-archive linking would do the same but CMake 3.25 repeats archives in the link line
# for their mutual dependencies, and a repeated whole archive defines everything twice.)
foreach(layer ${ONYX_LIBRARY_LAYERS})
  target_sources(onyx_shared PRIVATE $<TARGET_OBJECTS:${layer}>)
endforeach()
target_link_libraries(onyx_shared PRIVATE ${ONYX_LIBRARY_LAYERS} onyx_warnings)
# The public headers include <fmt/format.h> (graph/error.h's ONYX_CHECK / ONYX_THROW): the one
# third-party dependency a consumer sees. Their own includes are "graph/tensor.h" style,
# hence both include/ and include/onyx/ for consumers.
target_link_libraries(onyx_shared PUBLIC fmt::fmt)
target_include_directories(onyx_shared PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include> $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}/onyx>)
target_compile_features(onyx_shared PUBLIC cxx_std_20)
target_link_options(onyx_shared PRIVATE LINKER:--no-undefined)  # a missing dependency fails here
set_target_properties(onyx_shared PROPERTIES OUTPUT_NAME onyx EXPORT_NAME onyx
                      VERSION ${PROJECT_VERSION} SOVERSION ${ONYX_SOVERSION})
# Installed binaries keep a RUNPATH to dependencies outside the system folders (Open MPI's
# libmpi_cxx, CUDA and NCCL when built with them).
set_target_properties(onyx_shared onyx PROPERTIES INSTALL_RPATH_USE_LINK_PATH ON)

# Public headers: the closure of <onyx/onyx.h> over project headers (g++ -MM), kept with
# their layer folders. tests/install/check_install.sh fails when this list and the closure
# differ, so a public header that starts including another one shows up there.
set(ONYX_PUBLIC_HEADERS
    inference/session.h training/training_session.h distributed/communicator.h
    distributed/data_parallel.h autodiff/loss.h autodiff/recompute.h optimizers/optimizer.h optimizers/lr_schedule.h
    optimizers/loss_scaler.h graph/autocast.h
    graph/ir.h graph/tensor.h graph/dtype.h graph/error.h)
foreach(header ${ONYX_PUBLIC_HEADERS})
  get_filename_component(dir ${header} DIRECTORY)
  install(FILES ${PROJECT_SOURCE_DIR}/${header}
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/onyx/${dir})
endforeach()
install(FILES ${PROJECT_SOURCE_DIR}/include/onyx/onyx.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/onyx)

install(TARGETS onyx_shared EXPORT onyxTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS onyx RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# The optional `torch` component: libonyx_torch.so (onyx::torch, over libonyx.so and libtorch)
# and <onyx/torch.h> with the interop headers it includes (the closure of <onyx/torch.h> minus
# that of <onyx/onyx.h>; check_install.sh holds this list to it as well). Its own export set, so
# find_package(onyx) without the component never needs libtorch; the config file defines
# onyx::libtorch from the wheel onyx was built against before loading it.
if(TARGET onyx_torch)
  set_target_properties(onyx_torch PROPERTIES EXPORT_NAME torch VERSION ${PROJECT_VERSION} SOVERSION ${ONYX_SOVERSION}
                        # The wheel's lib/ by name: INSTALL_RPATH_USE_LINK_PATH skips folders
                        # inside the source tree, where scripts/setup.sh's .venv lives.
                        INSTALL_RPATH "$ORIGIN;${ONYX_LIBTORCH_ROOT}/lib" INSTALL_RPATH_USE_LINK_PATH ON)
  set(ONYX_TORCH_PUBLIC_HEADERS interop/torch_tensor.h interop/onnx_module.h interop/torch_ops.h)
  foreach(header ${ONYX_TORCH_PUBLIC_HEADERS})
    get_filename_component(dir ${header} DIRECTORY)
    install(FILES ${PROJECT_SOURCE_DIR}/${header}
            DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/onyx/${dir})
  endforeach()
  install(FILES ${PROJECT_SOURCE_DIR}/include/onyx/torch.h
          DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/onyx)
  install(TARGETS onyx_torch EXPORT onyxTorchTargets LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endif()

# CMake package.
set(ONYX_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/onyx)
install(EXPORT onyxTargets NAMESPACE onyx:: DESTINATION ${ONYX_CMAKE_DIR})
if(TARGET onyx_torch)
  install(EXPORT onyxTorchTargets NAMESPACE onyx:: DESTINATION ${ONYX_CMAKE_DIR})
endif()
math(EXPR ONYX_FMT_NEXT_MAJOR "${fmt_VERSION_MAJOR} + 1")
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/onyxConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/onyxConfig.cmake
                              INSTALL_DESTINATION ${ONYX_CMAKE_DIR})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/onyxConfigVersion.cmake
                                 COMPATIBILITY ${ONYX_VERSION_COMPATIBILITY})
install(FILES ${PROJECT_BINARY_DIR}/onyxConfig.cmake ${PROJECT_BINARY_DIR}/onyxConfigVersion.cmake
        DESTINATION ${ONYX_CMAKE_DIR})

# pkg-config. Paths are relative to the .pc file, so the tree can be installed anywhere
# (--prefix) or moved. Only the shared library is installed: nothing private to list.
file(RELATIVE_PATH ONYX_PC_TO_PREFIX /p/${CMAKE_INSTALL_LIBDIR}/pkgconfig /p)
string(REGEX REPLACE "/$" "" ONYX_PC_TO_PREFIX "${ONYX_PC_TO_PREFIX}")
configure_file(${PROJECT_SOURCE_DIR}/cmake/onyx.pc.in ${PROJECT_BINARY_DIR}/onyx.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/onyx.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
