#include "kiln/comm/pair_auth.h"

#include "kiln/base/error.h"

namespace kiln {

PairAuth parse_pair_auth(const std::string& value) {
  if (value == "auto") return PairAuth::kAuto;
  if (value == "on") return PairAuth::kOn;
  if (value == "off") return PairAuth::kOff;
  fail("dist.authenticate_pairs is '{}'; it must be auto, on or off", value);
}

const char* pair_auth_name(PairAuth a) {
  switch (a) {
    case PairAuth::kAuto:
      return "auto";
    case PairAuth::kOn:
      return "on";
    case PairAuth::kOff:
      return "off";
  }
  return "?";
}

bool pairs_authenticate(PairAuth a, bool remote) {
  return a == PairAuth::kOn || (a == PairAuth::kAuto && remote);
}

}  // namespace kiln
