// For tests: prints what the CPU context detected and chose (CpuContext::describe(), the text
// `bitsplit info --topology` prints), so that plane_kernels_test.cpp can check in a child process
// that BITSPLIT_ISA, read once per process, forces the tier.
#include <cstdio>

#include "bitsplit/cpu.h"

int main() {
  std::printf("%s", bitsplit::cpu::CpuContext().describe().c_str());
  return 0;
}
