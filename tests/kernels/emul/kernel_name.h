// A kernel's name without namespaces, return type or parameters, template arguments kept
// ("flash_dkdv_kernel<128>"), from its demangled symbol: how the emulator names the kernels it
// runs (the emulated function's symbol) and how the ptxas gate names ptxas's entries, so the two
// meet.
#pragma once

#include <string>
#include <string_view>

namespace kiln::emul {

// From a qualified name or a demangled function signature.
std::string short_kernel_name(std::string_view qualified);

// The short name of the function at `fn` in this executable, from its symbol table (kernels of an
// unnamed namespace have no dynamic symbol); `fallback` when the table does not name it.
std::string function_name(const void* fn, std::string_view fallback);

// "flash_dkdv_kernel<128>" from a mangled symbol; "" when it does not demangle.
std::string demangled_short_name(const char* mangled);

}  // namespace kiln::emul
