// Test-only: the properties every CPU kernel case must have, as GoogleTest value-parameterised
// suites (kernel_case_properties.cpp). A test binary instantiates them over its share of the
// registry (kernel_cases.h), e.g.
//   INSTANTIATE_TEST_SUITE_P(Q8_0, KernelTiers, ::testing::ValuesIn(tier_case_sets(q8_0)), set_name);
#pragma once

#include <gtest/gtest.h>

#include <ostream>
#include <string>

#include "kernel_cases.h"

namespace bitsplit::cpu::testing {

// Every ISA tier bitwise equal to the *_ref functions on every case of the set and every batch
// size of the case, on the file-layout views and on the packed planes; each tier's activation
// quantiser bitwise equal to the reference quantiser.
class KernelTiers : public ::testing::TestWithParam<CaseSet> {};

// On every tier and layout, each row's output is bitwise the same alone and inside a batch of any
// of the case's sizes (1..32), at any position.
class KernelBatchInvariance : public ::testing::TestWithParam<KernelCase> {};

// On every tier and layout, 1, 2, 3 threads and one per core (packing on as many) give the
// *_ref result bit for bit.
class KernelThreadInvariance : public ::testing::TestWithParam<KernelCase> {};

inline std::string set_name(const ::testing::TestParamInfo<CaseSet>& p) { return p.param.name; }
inline std::string case_name(const ::testing::TestParamInfo<KernelCase>& p) { return p.param.name(); }

// How GoogleTest prints a parameter (its default is a byte dump).
inline void PrintTo(const KernelCase& c, std::ostream* os) { *os << c.name(); }
inline void PrintTo(const CaseSet& s, std::ostream* os) { *os << s.name << " (" << s.cases.size() << " cases)"; }

}  // namespace bitsplit::cpu::testing
