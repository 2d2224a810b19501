// The data formats' enum alone (formats.h holds their names, aliases and encoders), so a recipe
// can hold data.format typed without including the encoders.
#pragma once

namespace kiln {

enum class DataFormat { kTokens, kChat, kInstruction, kCompletion, kText, kShareGpt, kPreference };

}  // namespace kiln
