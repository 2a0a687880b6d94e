// Reading a small text file (JSON configuration, an index) whole, refusing one above a size bound
// and anything that is not a regular file. Internal to engine/format.
#pragma once

#include <cstdint>
#include <string>

#include "bitsplit/status.h"

namespace bitsplit {

Result<std::string> read_bounded_file(const std::string& path, uint64_t max_bytes);

}  // namespace bitsplit
