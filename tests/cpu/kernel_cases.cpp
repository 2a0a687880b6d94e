// Test-only: the registry of CPU kernel cases (kernel_cases.h), each list with the reason for its
// shapes. Seeds are derived from the shape, so a case is the same in every run and binary.
#include "kernel_cases.h"

#include <map>

namespace bitsplit::cpu::testing {
namespace {

const int kGroups[] = {32, 64, 128};

std::vector<int64_t> one_to(int64_t n) {
  std::vector<int64_t> v;
  for (int64_t i = 1; i <= n; ++i) v.push_back(i);
  return v;
}

KernelCase make(Kernel kernel, int bits, Codes codes, Signs signs, int64_t out, int64_t in, int group,
                std::vector<int64_t> rows) {
  KernelCase c{.kernel = kernel, .bits = bits, .codes = codes, .signs = signs, .out = out, .in = in, .group = group,
               .rows = std::move(rows)};
  // One α per matrix comes with a wider sign stride, so both row strides are covered.
  c.sign_stride_extra = signs == Signs::kOneAlpha ? 3 : 0;
  c.seed = uint32_t(out * 7 + in * 13 + group + bits + 101 * int(signs) + 1009 * int(codes));
  return c;
}

// Plain planes: widths below one group (1, 3, 7), one group (64) and tails (111, 1023); outputs
// 1, 5, 17, 64 (partial 16-row tiles); batches 1, 5, 16, 17, 37 and 45 (the AMX tier's two 16-row
// passes and a 5-row tail on the AVX-512 kernel, or a 13-row one padded to a third pass). Drafts of 3 and 4 bits (packed as
// nibbles; the file-layout SIMD entry points fall back to the scalar kernel) with random codes only.
void add_plane_cases(std::vector<KernelCase>& v) {
  const std::pair<Kernel, int> kinds[] = {{Kernel::kDraft, 2}, {Kernel::kDraft, 3}, {Kernel::kDraft, 4},
                                          {Kernel::kResidual, 8}, {Kernel::kResidual, 6}};
  for (int group : kGroups)
    for (auto [kernel, bits] : kinds)
      for (Codes codes : {Codes::kFitted, Codes::kRandom}) {
        if (kernel == Kernel::kDraft && bits != 2 && codes == Codes::kFitted) continue;
        for (int64_t in : {1, 3, 7, 64, 111, 1023})
          for (int64_t out : {1, 5, 17, 64})
            v.push_back(make(kernel, bits, codes, Signs::kNone, out, in, group, {1, 5, 16, 17, 37, 45}));
      }
}

// Sign planes fused into the draft: widths off multiples of 8 and of the group (the last group's
// sign bytes are fewer than its share; 12 and 36 end mid-byte in the second or fifth byte) and
// 256, where every span of sign bytes is whole; every batch of 1..17 rows for 2 and 4 bits,
// 1, 5, 17 for 3 bits (packed like 4).
void add_sign_cases(std::vector<KernelCase>& v) {
  for (int group : kGroups)
    for (int bits : {2, 3, 4})
      for (Signs signs : {Signs::kAlphaPerRow, Signs::kOneAlpha})
        for (int64_t in : {1, 7, 12, 36, 100, 111, 200, 256, 1023})
          for (int64_t out : {1, 5, 17, 33})
            v.push_back(make(Kernel::kDraft, bits, Codes::kRandom, signs, out, in, group,
                             bits != 3 ? one_to(17) : std::vector<int64_t>{1, 5, 17}));
}

// Long 2-bit rows at group 64, the CUDA kernels' shapes: more groups than a warp has lanes and
// batches larger than the group-64 kernel's pass (up to 200 groups, 17 rows).
void add_long_draft_cases(std::vector<KernelCase>& v) {
  for (Signs signs : {Signs::kNone, Signs::kAlphaPerRow}) {
    for (int64_t in : {64, 200, 320}) v.push_back(make(Kernel::kDraft, 2, Codes::kRandom, signs, 37, in, 64, {5}));
    for (int64_t in : {64, 1280, 200 * 64})
      v.push_back(make(Kernel::kDraft, 2, Codes::kRandom, signs, 7, in, 64, {1, 5, 17}));
  }
}

// Q8_0: 1, 2, 3 and 33 blocks (the AVX-512 tier pairs blocks: odd counts take its tail); outputs
// 1, 5, 17, 37 (partial tiles of the 8- and the 16-lane tier); every batch of 1..17 rows.
void add_q8_0_cases(std::vector<KernelCase>& v) {
  for (Codes codes : {Codes::kFitted, Codes::kRandom})
    for (int64_t in : {32, 64, 96, 1056})
      for (int64_t out : {1, 5, 17, 37}) v.push_back(make(Kernel::kQ8_0, 8, codes, Signs::kNone, out, in, 32, one_to(17)));
}

std::vector<KernelCase> select(std::vector<KernelCase> all, CaseFilter keep) {
  std::erase_if(all, [&](const KernelCase& c) { return !keep(c); });
  return all;
}

}  // namespace

bool KernelCase::packable() const {
  return kernel != Kernel::kQ8_0 && PackedPlane::supported(group, bits, kernel == Kernel::kDraft);
}

std::string KernelCase::kind() const {
  std::string s = kernel == Kernel::kDraft ? "draft" : kernel == Kernel::kResidual ? "residual" : "q8_0";
  if (kernel != Kernel::kQ8_0) s += std::to_string(bits);
  s += codes == Codes::kFitted ? "_fitted" : "_random";
  if (signs == Signs::kAlphaPerRow) s += "_signs_row";
  if (signs == Signs::kOneAlpha) s += "_signs_one";
  return s;
}

std::string KernelCase::family() const { return kernel == Kernel::kQ8_0 ? kind() : kind() + "_g" + std::to_string(group); }

std::string KernelCase::name() const {
  return family() + "_o" + std::to_string(out) + "_i" + std::to_string(in);
}

bool plain_plane(const KernelCase& c) { return c.kernel != Kernel::kQ8_0 && c.signs == Signs::kNone; }
bool sign_plane(const KernelCase& c) { return c.signs != Signs::kNone; }
bool q8_0(const KernelCase& c) { return c.kernel == Kernel::kQ8_0; }
bool draft2(const KernelCase& c) { return c.kernel == Kernel::kDraft && c.bits == 2; }

std::vector<CaseSet> tier_case_sets(CaseFilter keep) {
  std::vector<KernelCase> all;
  add_plane_cases(all);
  add_sign_cases(all);
  add_long_draft_cases(all);
  add_q8_0_cases(all);
  std::vector<CaseSet> sets;
  std::map<std::string, size_t> index;
  for (KernelCase& c : select(std::move(all), keep)) {
    auto [it, added] = index.emplace(c.family(), sets.size());
    if (added) sets.push_back({c.family(), {}});
    sets[it->second].cases.push_back(std::move(c));
  }
  return sets;
}

// One shape per kernel and group, 37 outputs (two 16-row tiles and a tail) and 333 weights (a
// partial last group at every group size; Q8_0: 11 blocks), batches 1..32 and 37, 40, 53, 57 (the
// AMX tier's passes of 16 with tails of 5 rows, and of 8 and 9 rows padded to a pass): a row's result
// must not depend on n or on where in the batch it sits.
std::vector<KernelCase> batch_cases(CaseFilter keep) {
  std::vector<KernelCase> v;
  std::vector<int64_t> batches = one_to(32);
  batches.insert(batches.end(), {37, 40, 53, 57});
  for (int group : kGroups) {
    for (int bits : {2, 3, 4}) v.push_back(make(Kernel::kDraft, bits, Codes::kRandom, Signs::kNone, 37, 333, group, batches));
    for (int bits : {8, 6}) v.push_back(make(Kernel::kResidual, bits, Codes::kRandom, Signs::kNone, 37, 333, group, batches));
    for (Signs signs : {Signs::kAlphaPerRow, Signs::kOneAlpha})
      v.push_back(make(Kernel::kDraft, 2, Codes::kRandom, signs, 37, 333, group, batches));
  }
  v.push_back(make(Kernel::kQ8_0, 8, Codes::kRandom, Signs::kNone, 37, 352, 32, batches));
  return select(std::move(v), keep);
}

// More threads than 16-row tiles would need, a partial last tile (211 = 13 * 16 + 3) and 16 rows:
// the arena's static partition must not change a bit.
std::vector<KernelCase> thread_cases(CaseFilter keep) {
  std::vector<KernelCase> v;
  v.push_back(make(Kernel::kDraft, 2, Codes::kRandom, Signs::kNone, 211, 515, 64, {16}));
  for (int bits : {8, 6}) v.push_back(make(Kernel::kResidual, bits, Codes::kRandom, Signs::kNone, 211, 515, 64, {16}));
  for (Signs signs : {Signs::kAlphaPerRow, Signs::kOneAlpha})
    v.push_back(make(Kernel::kDraft, 2, Codes::kRandom, signs, 211, 515, 64, {16}));
  v.push_back(make(Kernel::kQ8_0, 8, Codes::kRandom, Signs::kNone, 211, 512, 32, {16}));
  return select(std::move(v), keep);
}

KernelCase bench_case(Kernel kernel, int bits, Signs signs, Shape shape) {
  return make(kernel, bits, Codes::kRandom, signs, shape.out, shape.in, kernel == Kernel::kQ8_0 ? 32 : 64, {1});
}

}  // namespace bitsplit::cpu::testing
