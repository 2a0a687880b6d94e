// Writes the seed corpora of the fuzz targets (seeds.h): `fuzz_seeds OUT_DIR [SHARED_DIR]` makes
// OUT_DIR/<target>/<seed> for every target. tools/fuzz.sh runs it before fuzzing.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "seeds.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fuzz_seeds OUT_DIR [SHARED_DIR]\n");
    return 2;
  }
  const std::filesystem::path out = argv[1];
  const std::string shared = argc > 2 ? argv[2] : "";
  for (const std::string& target : bitsplit::fuzz::fuzz_targets()) {
    std::filesystem::create_directories(out / target);
    size_t bytes = 0;
    const auto seeds = bitsplit::fuzz::make_seeds(target, shared);
    for (const auto& seed : seeds) {
      std::ofstream f(out / target / seed.name, std::ios::binary);
      f.write(reinterpret_cast<const char*>(seed.bytes.data()), std::streamsize(seed.bytes.size()));
      if (!f) {
        std::fprintf(stderr, "fuzz_seeds: cannot write %s\n", (out / target / seed.name).c_str());
        return 1;
      }
      bytes += seed.bytes.size();
    }
    std::printf("%-20s %3zu seeds, %zu bytes\n", target.c_str(), seeds.size(), bytes);
  }
  return 0;
}
