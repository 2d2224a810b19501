// An object that lives until the process ends and whose destructor never runs: for what a static
// destructor must not touch. At exit, static destructors run in the reverse order of
// construction, so a library opened after an object was made (cuBLASLt through dlopen, the CUDA
// runtime's own teardown) has already cleaned up when that object's destructor would call it: a
// crash after the work is done. Such objects are made once, on first use, and left to the
// operating system, which reclaims their memory and the GPU's anyway.
//
//   const Thing& thing() { return process_lifetime<Thing>([] { return Thing(...); }); }
//
// One object per (T, call site): each call site's lambda has its own type.
#pragma once

#include <utility>

namespace kiln {

template <typename T, typename Make>
T& process_lifetime(Make&& make) {
  // Never deleted, by design (see above): a pointer to a heap object, not a static T.
  static T* const object = new T(std::forward<Make>(make)());
  return *object;
}

}  // namespace kiln
