// The instruction-set regions of the per-tier kernel files (cpu/*_avx2.cpp, *_avx512.cpp,
// packed_amx.cpp, quant/bitsplit_fit_*.cpp): the code between BITSPLIT_TARGET_BEGIN(isa) and
// BITSPLIT_TARGET_END is compiled for that instruction set, the rest of the file for the build's
// baseline, and the tier runs only where cpuid says it may (cpu/cpu_context.cpp).
//
// Why regions and not per-file -m flags: a file compiled with -mavx512f compiles with AVX-512 every
// inline function and template instantiation it uses from shared headers too (std::vector<float>'s
// growth, Status, std::string ...). Those are weak symbols, the linker keeps one copy of each for the
// whole program — maybe this one — and generic code on a machine without AVX-512 then stops with
// SIGILL (the sanitizer build did on an AVX2-only EPYC). Inside a region only functions defined there
// take the instruction set; instantiations of templates defined before it keep the baseline.
//
// The rule for a tier file, checked on the built objects by tests/cpu/isa_weak_symbols.sh:
//   1. include every header first — the standard library, bitsplit/, the shared declarations;
//   2. BITSPLIT_TARGET_BEGIN(BITSPLIT_ISA_...);
//   3. the tier's own helper headers (everything in them in an unnamed namespace), then its code;
//   4. BITSPLIT_TARGET_END at the end of the file.
// Functions the tier defines for others to call are declared before the region (step 1) and
// defined inside it: GCC and clang merge the target into the definition.
#pragma once

#define BITSPLIT_PRAGMA(x) _Pragma(#x)
#if defined(__clang__)
#define BITSPLIT_TARGET_BEGIN(isa) \
  BITSPLIT_PRAGMA(clang attribute push(__attribute__((target(isa))), apply_to = function))
#define BITSPLIT_TARGET_END BITSPLIT_PRAGMA(clang attribute pop)
#else
#define BITSPLIT_TARGET_BEGIN(isa) BITSPLIT_PRAGMA(GCC push_options) BITSPLIT_PRAGMA(GCC target(isa))
#define BITSPLIT_TARGET_END BITSPLIT_PRAGMA(GCC pop_options)
#endif

// The kernel tiers (cpu.h's Isa): exactly what cpu_context.cpp checks in cpuid before it picks one.
#define BITSPLIT_ISA_AVX2 "avx2,fma,f16c"
#define BITSPLIT_ISA_AVX512 "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c"
#define BITSPLIT_ISA_AMX BITSPLIT_ISA_AVX512 ",amx-tile,amx-int8"
// The bit-split fit's tiers (quant/bitsplit_quantizer.cpp's FitTier and its cpuid checks).
#define BITSPLIT_ISA_FIT_AVX2 "avx2"
#define BITSPLIT_ISA_FIT_AVX512 "avx512f,avx512dq,avx512bw,avx512vl,avx2"
