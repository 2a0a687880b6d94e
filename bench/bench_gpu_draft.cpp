// GPU draft-plane benchmark: 2-bit D·X GB/s (plane bytes read per second) against the
// device-to-device copy bandwidth measured in the same run (bytes read + written per second;
// ratio 1 = the kernel streams its plane at the copy's memory bandwidth), n = 1 and 16 rows.
// Prints a table; exits 0 with a message when there is no GPU. Usage: ./build/bench/bench_gpu_draft
#include <cstdio>
#include <random>
#include <vector>

#include "bitsplit/cpu.h"
#include "bitsplit/gpu.h"
#include "bitsplit/quant.h"

int main() {
  using namespace bitsplit;
  if (gpu::device_count() == 0) {
    std::printf("bench_gpu_draft: no CUDA device (%s); nothing to measure\n",
                gpu::compiled_with_cuda() ? "compiled with CUDA" : "built without CUDA");
    return 0;
  }
  auto copy = gpu::measure_copy_bandwidth(uint64_t(1) << 30, 20);
  if (!copy) {
    std::fprintf(stderr, "%s\n", copy.status().message().c_str());
    return 1;
  }
  std::printf("device: %s\ndevice-to-device copy: %.1f GB/s (read + write)\n\n", gpu::describe_device(0)->c_str(),
              *copy / 1e9);
  std::printf("| shape out x in | n | us/call | plane GB/s | ratio to copy |\n|---|---|---|---|---|\n");
  auto dev = gpu::DraftMatmul::create(0);
  if (!dev) {
    std::fprintf(stderr, "%s\n", dev.status().message().c_str());
    return 1;
  }
  std::mt19937 rng(1);
  const std::pair<int64_t, int64_t> shapes[] = {{4096, 4096}, {14336, 4096}, {4096, 14336}};
  // Planes are keyed by the address of their codes: every plane's codes stay alive (a distinct
  // key) until the end.
  std::vector<std::vector<uint8_t>> all_codes;
  for (auto [out, in] : shapes) {
    const int group = 64;
    const int64_t groups = quant::groups_per_row(in, group), row = quant::code_row_bytes(in, group, 2);
    std::vector<uint8_t>& codes = all_codes.emplace_back(size_t(out * row));
    std::vector<uint16_t> scales(size_t(out * groups), quant::fp32_to_fp16(0.01f)), offsets(scales.size(),
                                                                                           quant::fp32_to_fp16(-0.02f));
    for (auto& c : codes) c = uint8_t(rng());
    DraftPlaneView plane{codes.data(), scales.data(), offsets.data(), out, in, group, 2};
    if (Status st = (*dev)->upload(codes.data(), plane); !st) {
      std::fprintf(stderr, "%s\n", st.message().c_str());
      return 1;
    }
    const double plane_bytes = double(codes.size()) + 4.0 * double(scales.size());
    for (int64_t n : {1, 16}) {
      std::vector<float> x(size_t(n * in));
      for (auto& v : x) v = float(int(rng() % 200) - 100) / 50.0f;
      cpu::QuantizedActivations qa;
      cpu::quantize_activations_ref(x.data(), n, in, group, qa);
      std::vector<float> y(size_t(n * out));
      // Stages the activations time_kernel() launches on.
      if (Status st = (*dev)->run(codes.data(), {qa.q.data(), qa.scale.data(), qa.sum.data(), n, qa.padded, qa.groups},
                                  y.data());
          !st) {
        std::fprintf(stderr, "%s\n", st.message().c_str());
        return 1;
      }
      auto t = (*dev)->time_kernel(codes.data(), n, 50);
      if (!t) {
        std::fprintf(stderr, "%s\n", t.status().message().c_str());
        return 1;
      }
      const double gbs = plane_bytes / *t / 1e9;
      std::printf("| %lld x %lld | %lld | %.1f | %.1f | %.2f |\n", (long long)out, (long long)in, (long long)n, *t * 1e6,
                  gbs, gbs * 1e9 / *copy);
    }
  }
  return 0;
}
