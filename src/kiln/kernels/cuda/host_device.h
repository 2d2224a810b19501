// KILN_HOST_DEVICE: a function both nvcc's device code and plain C++ (host code, CI tests without
// a GPU) compile.
#pragma once

#if defined(__CUDACC__)
#define KILN_HOST_DEVICE __host__ __device__
#else
#define KILN_HOST_DEVICE
#endif
