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
// The columns of `weight` ("blk.0.attn_q.weight") when m has an entry of exactly `cols` values;
// null otherwise (no matrix, no entry, another width): the fit then weighs columns equally.
const float* importance_columns(const ImportanceMatrix* m, const std::string& weight, int64_t cols);
Status write_imatrix(const ImportanceMatrix& imatrix, int64_t n_tokens, const std::string& source_text,
                     const std::string& path);

}  // namespace bitsplit
