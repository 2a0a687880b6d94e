// Validators for the CLI's numeric options. CLI11's own range checks print their bounds with
// %f (a 309-digit "maximum" for an unbounded float) and call a word that is no number "not in
// range"; these say what is wrong in the words a user needs, e.g. "'abc' is not a whole number",
// "-3 is below the minimum 0", "'-1' is not a seed (a whole number 0..18446744073709551615)".
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>

namespace bitsplit::cli {

// A whole number in [lo, hi] (decimal, optional sign, nothing after it).
CLI::Validator whole_in(int64_t lo, int64_t hi);
// A whole number >= lo.
CLI::Validator whole_at_least(int64_t lo);
// A finite real number in [lo, hi].
CLI::Validator real_in(double lo, double hi);
// A finite real number > lo.
CLI::Validator real_above(double lo);
// A seed: a whole number 0..2^64-1 (no sign, no wrap-around).
CLI::Validator seed_number();

}  // namespace bitsplit::cli
