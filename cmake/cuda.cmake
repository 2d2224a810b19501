# The CUDA backend's build: KILN_CUDA=AUTO (default: on when the CUDA toolkit, cuBLASLt and NCCL
# are found), ON (an error when they are not) or OFF. Sets KILN_HAVE_CUDA.
#
# The developers' and CI machines have the toolkit but no GPU and no driver, so there the CUDA
# code is compile-only: cudart is linked statically (it opens libcuda.so.1 at run time, so a
# machine without a driver still starts kiln), cuBLASLt and NCCL dynamically, and libcuda never.
# Targets sm_80 (A100), sm_89 (L4) and sm_90 (H100/H200): KILN_CUDA_ARCHITECTURES overrides.
# nvcc warnings are errors, and so are register spills and local-memory use (ptxas), so a hot
# kernel that starts spilling fails the build. The C++-only flags (-Wall, -march=native) never
# reach nvcc (see the top-level CMakeLists.txt).
set(KILN_CUDA AUTO CACHE STRING "Build the CUDA backend: AUTO, ON or OFF")
set_property(CACHE KILN_CUDA PROPERTY STRINGS AUTO ON OFF)
set(KILN_CUDA_ARCHITECTURES "80;89;90" CACHE STRING "CUDA architectures of the CUDA backend")
set(KILN_HAVE_CUDA OFF)

if(NOT KILN_CUDA STREQUAL "OFF")
  if(NOT DEFINED CMAKE_CUDA_COMPILER AND NOT DEFINED ENV{CUDACXX}
     AND EXISTS /usr/local/cuda/bin/nvcc)
    set(CMAKE_CUDA_COMPILER /usr/local/cuda/bin/nvcc)
  endif()
  include(CheckLanguage)
  check_language(CUDA)
  if(CMAKE_CUDA_COMPILER)
    find_package(CUDAToolkit)
  endif()
  if(CUDAToolkit_FOUND)
    find_path(KILN_NCCL_INCLUDE nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS})
    find_library(KILN_NCCL nccl HINTS ${CUDAToolkit_LIBRARY_DIR} ${CUDAToolkit_LIBRARY_ROOT}/lib)
  endif()
  if(CUDAToolkit_FOUND AND TARGET CUDA::cublasLt AND KILN_NCCL AND KILN_NCCL_INCLUDE)
    set(KILN_HAVE_CUDA ON)
  elseif(KILN_CUDA STREQUAL "ON")
    message(FATAL_ERROR "KILN_CUDA=ON: the CUDA toolkit (nvcc, cuBLASLt) or NCCL was not found")
  else()
    message(STATUS "kiln: no CUDA toolkit with cuBLASLt and NCCL found; CPU-only build")
  endif()
endif()

if(KILN_HAVE_CUDA)
  set(CMAKE_CUDA_ARCHITECTURES ${KILN_CUDA_ARCHITECTURES})
  set(CMAKE_CUDA_RUNTIME_LIBRARY Static)
  enable_language(CUDA)
  # CMake 3.25 knows no C++20 flag for nvcc 13, yet a target with .cu sources takes its CUDA
  # dialect from CMAKE_CXX_STANDARD (20) and fails to generate without one. Defined empty: the
  # dialect flag is the -std=c++20 of the compile options below.
  set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "")
  set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "")
  message(STATUS "kiln: CUDA backend for sm ${CMAKE_CUDA_ARCHITECTURES} "
                 "(nvcc ${CMAKE_CUDA_COMPILER_VERSION}, NCCL ${KILN_NCCL})")
  # Flags of every CUDA translation unit (the nvcc side only).
  add_compile_options(
    "$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings>"
    "$<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=--warn-on-spills,--warn-on-local-memory-usage,--warning-as-error>"
    "$<$<COMPILE_LANGUAGE:CUDA>:--expt-relaxed-constexpr>"
    # CMake 3.25 does not know nvcc 13's C++20 flag (CMAKE_CUDA_STANDARD 20 fails to generate),
    # so the dialect is passed directly.
    "$<$<COMPILE_LANGUAGE:CUDA>:-std=c++20>")
  # NCCL, linked dynamically (the GPU machine's own libnccl.so.2 is found at run time).
  add_library(kiln_nccl INTERFACE)
  target_link_libraries(kiln_nccl INTERFACE ${KILN_NCCL})
  target_include_directories(kiln_nccl INTERFACE ${KILN_NCCL_INCLUDE})
endif()
