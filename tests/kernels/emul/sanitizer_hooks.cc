// The callbacks of the kernel-address sanitizer's instrumentation (gcc -fsanitize=kernel-address
// --param asan-instrumentation-with-call-threshold=0 --param asan-globals=1), which the emulated
// kernel sources are compiled with: each load and store calls __asan_{load,store}N_noabort before
// it happens, and each instrumented file registers its globals (with their redzones) at start-up.
// Off emulated threads (host code of the same files, other threads) the calls do nothing.
#include <cstddef>
#include <cstdint>

#include "kernels/emul/access_check.h"
#include "kernels/emul/device_state.h"

namespace kiln::emul {
namespace {

inline void on_access(uintptr_t addr, size_t bytes, Access kind) {
  BlockRun* b = BlockRun::current();
  if (b == nullptr || b->on_own_stack(addr)) return;
  check_access(*b, b->current_thread(), addr, bytes, kind);
}

// gcc's descriptor of an instrumented global (asan ABI version 8).
struct AsanGlobal {
  const void* beg;
  size_t size;
  size_t size_with_redzone;
  const char* name;
  const char* module_name;
  uintptr_t has_dynamic_init;
  void* location;
  uintptr_t odr_indicator;
};

}  // namespace
}  // namespace kiln::emul

using kiln::emul::Access;
using kiln::emul::on_access;

extern "C" {

#define KILN_EMUL_HOOK(n)                                                          \
  void __asan_load##n##_noabort(uintptr_t a) { on_access(a, n, Access::kRead); }   \
  void __asan_store##n##_noabort(uintptr_t a) { on_access(a, n, Access::kWrite); } \
  void __asan_load##n(uintptr_t a) { on_access(a, n, Access::kRead); }             \
  void __asan_store##n(uintptr_t a) { on_access(a, n, Access::kWrite); }
KILN_EMUL_HOOK(1)
KILN_EMUL_HOOK(2)
KILN_EMUL_HOOK(4)
KILN_EMUL_HOOK(8)
KILN_EMUL_HOOK(16)
#undef KILN_EMUL_HOOK

void __asan_loadN_noabort(uintptr_t a, size_t n) { on_access(a, n, Access::kRead); }
void __asan_storeN_noabort(uintptr_t a, size_t n) { on_access(a, n, Access::kWrite); }
void __asan_loadN(uintptr_t a, size_t n) { on_access(a, n, Access::kRead); }
void __asan_storeN(uintptr_t a, size_t n) { on_access(a, n, Access::kWrite); }

// Every instrumented global is a variable an emulated kernel may use as shared memory (the kernel
// sources define no other globals that kernels touch): bounds and redzone as gcc laid them out.
void __asan_register_globals(kiln::emul::AsanGlobal* g, size_t n) {
  auto& m = kiln::emul::Device::get().memory();
  for (size_t i = 0; i < n; ++i) {
    m.add(kiln::emul::RegionKind::kStaticShared, g[i].beg, g[i].size,
          g[i].size_with_redzone - g[i].size, std::string("'") + g[i].name + "'");
  }
}
// At exit only; the emulated device may already be gone.
void __asan_unregister_globals(kiln::emul::AsanGlobal*, size_t) {}

void __asan_handle_no_return() {}
void __asan_init() {}
void __asan_version_mismatch_check_v8() {}
void __asan_before_dynamic_init(const char*) {}
void __asan_after_dynamic_init() {}

}  // extern "C"
