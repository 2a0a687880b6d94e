// Seed inputs for the fuzz harnesses, made from the repository's own fixtures: tiny models
// (original, Q8_0, bit-split), a delta and an importance matrix, small vocabularies and
// tokenizer.json files, option strings; and, when ../shared is present, its vocabularies cut
// down to a few hundred tokens and the texts of llama.cpp's tokenizer suites. Used by
// fuzz_seeds (writes them for libFuzzer) and by tests/fuzz/fuzz_regression_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace bitsplit::fuzz {

struct Seed {
  std::string name;
  std::vector<uint8_t> bytes;
};

// The fuzz targets, by the name their harness and seed folder use (fuzz_<target>).
const std::vector<std::string>& fuzz_targets();

// Seeds for `target`; `shared_dir` (../shared, may be empty) adds those made from its files.
std::vector<Seed> make_seeds(const std::string& target, const std::string& shared_dir);

}  // namespace bitsplit::fuzz
