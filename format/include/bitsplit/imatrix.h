// The importance matrix file (`bitsplit imatrix` writes it, `convert --imatrix` reads it).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "bitsplit/status.h"

namespace bitsplit {

// Per-column importance (mean squared activation) of each projection, by weight name.
using ImportanceMatrix = std::map<std::string, std::vector<float>>;
Result<ImportanceMatrix> read_imatrix(const std::string& path);
Status write_imatrix(const ImportanceMatrix& imatrix, int64_t n_tokens, const std::string& source_text,
                     const std::string& path);

}  // namespace bitsplit
