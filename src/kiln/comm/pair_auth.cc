#include "kiln/comm/pair_auth.h"

#include "kiln/base/error.h"

namespace kiln {

bool pairs_authenticate(PairAuth a, bool remote) {
  return a == PairAuth::kOn || (a == PairAuth::kAuto && remote);
}

}  // namespace kiln
