#include "kiln/kernels/device/stream.h"

#include "kiln/base/error.h"

namespace kiln {

double Event::seconds_since(const Event&) const {
  fail("Event::seconds_since: this event was made by record(), not record_timed()");
}

}  // namespace kiln
