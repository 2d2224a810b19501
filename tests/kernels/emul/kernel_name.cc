#include "kernels/emul/kernel_name.h"

#include <cxxabi.h>
#include <elf.h>
#include <link.h>

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <iterator>
#include <unordered_map>

namespace kiln::emul {

namespace {
void erase_all(std::string& s, std::string_view what) {
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at)) {
    s.erase(at, what.size());
  }
}
}  // namespace

std::string short_kernel_name(std::string_view qualified) {
  std::string s(qualified);
  erase_all(s, "(anonymous namespace)::");
  erase_all(s, "{anonymous}::");
  // The name ends at the parameter list: the first '(' outside template arguments.
  int depth = 0;
  size_t begin = 0, end = s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<') ++depth;
    if (c == '>') --depth;
    if (depth != 0) continue;
    if (c == '(') {
      end = i;
      break;
    }
    if (c == ' ') begin = i + 1;  // a return type before the name
    if (c == ':' && i + 1 < s.size() && s[i + 1] == ':') begin = i + 2;
  }
  while (begin < end && s[begin] == '&') ++begin;
  return s.substr(begin, end - begin);
}

std::string demangled_short_name(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  if (status != 0 || d == nullptr) return "";
  std::string name = short_kernel_name(d);
  std::free(d);
  return name;
}

namespace {

// Function symbols of the executable by address (where it is loaded), read once.
class SymbolTable {
 public:
  SymbolTable() {
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* self) {
          if (info->dlpi_name == nullptr || info->dlpi_name[0] == '\0') {
            static_cast<SymbolTable*>(self)->bias_ = info->dlpi_addr;
            return 1;
          }
          return 0;
        },
        this);
    read("/proc/self/exe");
  }
  const char* find(uintptr_t addr) const {
    auto it = names_.find(addr - bias_);
    return it == names_.end() ? nullptr : it->second.c_str();
  }

 private:
  void read(const char* path) {
    std::ifstream in(path, std::ios::binary);
    const std::string elf((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (elf.size() < sizeof(Elf64_Ehdr) || elf.compare(0, 4, ELFMAG) != 0) return;
    const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(elf.data());
    const auto* sh = reinterpret_cast<const Elf64_Shdr*>(elf.data() + eh->e_shoff);
    for (int i = 0; i < eh->e_shnum; ++i) {
      if (sh[i].sh_type != SHT_SYMTAB) continue;
      const char* strtab = elf.data() + sh[sh[i].sh_link].sh_offset;
      const auto* sym = reinterpret_cast<const Elf64_Sym*>(elf.data() + sh[i].sh_offset);
      for (size_t k = 0; k < sh[i].sh_size / sizeof(Elf64_Sym); ++k) {
        if (ELF64_ST_TYPE(sym[k].st_info) == STT_FUNC && sym[k].st_value != 0) {
          names_.emplace(sym[k].st_value, strtab + sym[k].st_name);
        }
      }
    }
  }
  uintptr_t bias_ = 0;
  std::unordered_map<uintptr_t, std::string> names_;
};

}  // namespace

std::string function_name(const void* fn, std::string_view fallback) {
  static const SymbolTable table;
  const char* mangled = table.find(reinterpret_cast<uintptr_t>(fn));
  const std::string name = mangled != nullptr ? demangled_short_name(mangled) : std::string();
  return name.empty() ? std::string(fallback) : name;
}

}  // namespace kiln::emul
