// Checks of an output path before any work: writers (convert, quantize, delta, imatrix) refuse
// to overwrite one of their inputs (the same file, also through a symlink or a hard link) or
// to replace something that is not a regular file (a device such as /dev/null, a FIFO, a
// directory), and say so before converting rather than after, as they do for a missing or
// unwritable output directory.
#pragma once

#include <string>
#include <vector>

#include "bitsplit/status.h"

namespace bitsplit::cli {

// `what` names the option ("output", "-o") in the error.
Status check_output_path(const std::string& out, const std::vector<std::string>& inputs, const std::string& what);

}  // namespace bitsplit::cli
