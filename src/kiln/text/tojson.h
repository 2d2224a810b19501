// The `tojson` filter of Hugging Face chat templates: transformers replaces Jinja's own (which
// sorts keys and escapes HTML characters) with json.dumps(x, ensure_ascii=False), so a value
// renders with its keys in their given order, ", " and ": " as separators and non-ASCII text as
// it is.
#pragma once

#include <string>

#include "kiln/base/json.h"

namespace kiln {

// json.dumps(value, ensure_ascii=False) of the value `j` holds, or with indent >= 0
// json.dumps(value, ensure_ascii=False, indent=indent) (Llama 3's `tojson(indent=4)`). Throws
// kiln::Error for strings that are not valid UTF-8.
std::string tojson(const OrderedJson& j, int indent = -1);

}  // namespace kiln
