// Kernel launches under the emulator: KILN_LAUNCH(grid, block, shared bytes, stream, kernel)(args)
// of the kernel sources (kiln/kernels/cuda/launch.cuh) becomes
// kiln::emul::launch<kernel>(grid, block, shared bytes)(args), which converts the arguments to
// the kernel's parameter types (as a call would) and runs the whole grid before returning.
#pragma once

#include <cstddef>
#include <string>
#include <tuple>
#include <utility>

#include "kernels/emul/kernel_name.h"
#include "kernels/emul/runtime_api.h"

namespace kiln::emul {

// The launch-independent part: runs body(arg) as every thread of every block (launch_run.cc).
// [params_begin, params_end) holds the kernel and its argument values, which the threads read.
struct LaunchSpec {
  const char* name;
  const void* kernel;
  dim3 grid, block;
  size_t dynamic_shared;
};
void run_launch(const LaunchSpec& spec, void (*body)(void*), void* arg, const void* params_begin,
                const void* params_end);

template <typename... P>
class Launcher {
 public:
  Launcher(const char* name, void (*kernel)(P...), dim3 grid, dim3 block, size_t shared)
      : spec_{name, reinterpret_cast<const void*>(kernel), grid, block, shared}, kernel_(kernel) {}

  template <typename... A>
  void operator()(A&&... args) const {
    static_assert(sizeof...(A) == sizeof...(P), "a kernel launch with the wrong argument count");
    const Bound bound{kernel_, std::tuple<P...>(std::forward<A>(args)...)};
    run_launch(spec_, &Launcher::body, const_cast<Bound*>(&bound), &bound, &bound + 1);
  }

 private:
  struct Bound {
    void (*kernel)(P...);
    std::tuple<P...> params;
  };
  // One thread's run: the kernel with its own copy of the arguments.
  static void body(void* arg) {
    const Bound& b = *static_cast<const Bound*>(arg);
    std::apply(b.kernel, b.params);
  }

  LaunchSpec spec_;
  void (*kernel_)(P...);
};

// The kernel's name with its template arguments resolved ("flash_dkdv_kernel<128>"), or as
// the source spells it when the executable has no symbol table.
template <auto Kernel>
const char* kernel_name(const char* source) {
  static const std::string name = function_name(reinterpret_cast<const void*>(Kernel), source);
  return name.c_str();
}

template <typename... P>
Launcher<P...> make_launcher(const char* name, void (*kernel)(P...), dim3 grid, dim3 block,
                             size_t shared) {
  return Launcher<P...>(name, kernel, grid, block, shared);
}

template <auto Kernel>
auto launch(const char* source, dim3 grid, dim3 block, size_t shared) {
  return make_launcher(kernel_name<Kernel>(source), Kernel, grid, block, shared);
}

}  // namespace kiln::emul

#define KILN_EMULATED_LAUNCH(grid, block, shared, stream, ...) \
  ((void)(stream), ::kiln::emul::launch<__VA_ARGS__>(#__VA_ARGS__, grid, block, shared))
