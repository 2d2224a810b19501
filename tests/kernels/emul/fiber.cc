#include "kernels/emul/fiber.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <stdexcept>

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

namespace kiln::emul {

#if defined(__x86_64__)

struct FiberContext {
  void* sp = nullptr;  // the stack pointer at the switch; the registers lie above it
};

extern "C" void kiln_emul_switch(void** save_sp, void* load_sp);
extern "C" void kiln_emul_start();

// kiln_emul_switch(save, load): pushes the callee-saved registers and the SSE/x87 control
// words, stores rsp in *save, loads rsp from load, pops the same and returns into the other
// context. kiln_emul_start is the first return address of a fresh stack: it calls r13(r12).
asm(R"(
  .text
  .globl kiln_emul_switch
  .type kiln_emul_switch, @function
kiln_emul_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $16, %rsp
  stmxcsr 8(%rsp)
  fnstcw (%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr 8(%rsp)
  fldcw (%rsp)
  addq $16, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size kiln_emul_switch, .-kiln_emul_switch

  .globl kiln_emul_start
  .type kiln_emul_start, @function
kiln_emul_start:
  movq %r12, %rdi
  callq *%r13
  ud2
  .size kiln_emul_start, .-kiln_emul_start
)");

namespace {
// The first frame of a fresh stack, as kiln_emul_switch pops it (lowest address first).
struct StartFrame {
  uint16_t fpu_control;  // x87 control word
  uint16_t pad0[3];
  uint32_t mxcsr;
  uint32_t pad1;
  uint64_t r15, r14, r13, r12, rbx, rbp;
  uint64_t ret;  // kiln_emul_start
};
static_assert(sizeof(StartFrame) == 72);
}  // namespace

void Fiber::reset(Entry entry, void* arg) {
  // After `ret` pops StartFrame::ret, rsp must be 16-byte aligned for kiln_emul_start's call.
  const auto top = reinterpret_cast<uintptr_t>(stack_high_) & ~uintptr_t{15};
  auto* f = reinterpret_cast<StartFrame*>(top - 16 - sizeof(StartFrame));
  std::memset(f, 0, sizeof *f);
  f->fpu_control = 0x037f;  // the ABI's initial x87 control word
  f->mxcsr = 0x1f80;        // round to nearest, exceptions masked, no flush to zero
  f->r12 = reinterpret_cast<uint64_t>(arg);
  f->r13 = reinterpret_cast<uint64_t>(entry);
  f->ret = reinterpret_cast<uint64_t>(&kiln_emul_start);
  self_->sp = f;
}

void Fiber::resume() { kiln_emul_switch(&caller_->sp, self_->sp); }

void Fiber::suspend() { kiln_emul_switch(&self_->sp, caller_->sp); }

#else  // ucontext

struct FiberContext {
  ucontext_t uc;
};

namespace {
// makecontext passes int arguments: the pointers travel in two halves.
void start_trampoline(int entry_hi, int entry_lo, int arg_hi, int arg_lo) {
  const auto join = [](int hi, int lo) {
    return (static_cast<uintptr_t>(static_cast<uint32_t>(hi)) << 32) | static_cast<uint32_t>(lo);
  };
  auto entry = reinterpret_cast<Fiber::Entry>(join(entry_hi, entry_lo));
  entry(reinterpret_cast<void*>(join(arg_hi, arg_lo)));
}
}  // namespace

void Fiber::reset(Entry entry, void* arg) {
  getcontext(&self_->uc);
  self_->uc.uc_stack.ss_sp = stack_low_;
  self_->uc.uc_stack.ss_size = static_cast<size_t>(stack_high_ - stack_low_);
  self_->uc.uc_link = nullptr;
  const auto e = reinterpret_cast<uintptr_t>(entry), a = reinterpret_cast<uintptr_t>(arg);
  makecontext(&self_->uc, reinterpret_cast<void (*)()>(&start_trampoline), 4,
              static_cast<int>(e >> 32), static_cast<int>(e & 0xffffffffu),
              static_cast<int>(a >> 32), static_cast<int>(a & 0xffffffffu));
}

void Fiber::resume() { swapcontext(&caller_->uc, &self_->uc); }

void Fiber::suspend() { swapcontext(&self_->uc, &caller_->uc); }

#endif

Fiber::Fiber(size_t stack_bytes)
    : self_(std::make_unique<FiberContext>()), caller_(std::make_unique<FiberContext>()) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t stack = (stack_bytes + page - 1) / page * page;
  mapping_bytes_ = stack + page;
  void* m =
      mmap(nullptr, mapping_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::runtime_error("emulator: cannot map a fiber stack");
  mapping_ = static_cast<char*>(m);
  mprotect(mapping_, page, PROT_NONE);  // an overflow faults instead of corrupting memory
  stack_low_ = mapping_ + page;
  stack_high_ = mapping_ + mapping_bytes_;
}

Fiber::~Fiber() { munmap(mapping_, mapping_bytes_); }

}  // namespace kiln::emul
