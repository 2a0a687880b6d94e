// The importance matrix file (`bitsplit imatrix` writes it, `convert --imatrix` reads it): per
// projection the mean squared activation of each input column and, with `imatrix --covariance`,
// the input's whole second-moment matrix, from which convert fits the draft with error feedback.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bitsplit/status.h"

namespace bitsplit {

// Per-column importance (mean squared activation) of each projection, by weight name.
using ImportanceMatrix = std::map<std::string, std::vector<float>>;
// One projection input's second moments E[x x^T]: n x n floats, row-major, kept alive by `owner`
// (the vector they were summed in, or the mapped imatrix file: read_input_covariances copies
// nothing, so a 1.5B model's ~10 GB of matrices are paged in one projection at a time).
struct Covariance {
  int64_t n = 0;
  // 0: the whole n x n matrix; > 0: only its diagonal blocks of `block` columns, one after
  // another (a calibration layer by layer keeps these; quant::covariance_floats values).
  int64_t block = 0;
  const float* data = nullptr;
  std::shared_ptr<const void> owner;
  static std::shared_ptr<const Covariance> holding(std::vector<float> values, int64_t n, int64_t block = 0);
};
// By weight name. Projections that read one input (attn_q/k/v, ffn_gate/up) share one matrix.
using InputCovariances = std::map<std::string, std::shared_ptr<const Covariance>>;

// The 1-D importance vectors of the file (its covariance matrices are left out).
Result<ImportanceMatrix> read_imatrix(const std::string& path);
// The file's covariance matrices (empty when it has none). Errors: a matrix that is not square
// F32, a non-finite or negative diagonal, a shared-input entry naming no matrix.
Result<InputCovariances> read_input_covariances(const std::string& path);
// Both parts of the file from one opening (what convert and eval read).
struct ImatrixFile {
  ImportanceMatrix columns;
  InputCovariances covariances;  // empty unless made with --covariance
};
Result<ImatrixFile> read_imatrix_file(const std::string& path);
// The columns of `weight` ("blk.0.attn_q.weight") when m has an entry of exactly `cols` values;
// null otherwise (no matrix, no entry, another width): the fit then weighs columns equally.
const float* importance_columns(const ImportanceMatrix* m, const std::string& weight, int64_t cols);
// The [cols x cols] covariance of `weight`'s input, or null (none, or another width).
const float* input_covariance(const InputCovariances* m, const std::string& weight, int64_t cols);
// Writes the importance vectors and, when covariances is not null, the matrices (each shared
// matrix once: tensor "<weight>.cov" for the first reader, metadata "imatrix.same_input.<w>"
// naming that weight for the others).
Status write_imatrix(const ImportanceMatrix& imatrix, const InputCovariances* covariances, int64_t n_tokens,
                     const std::string& source_text, const std::string& path);

}  // namespace bitsplit
