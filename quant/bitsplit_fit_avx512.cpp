// The bit-split fit (bitsplit_fit.inc) compiled for AVX512; bit-identical with split_row_ref.
#include "bitsplit/quant.h"
#include "bitsplit/status.h"

#define BITSPLIT_FIT_NS fit_avx512
#include "bitsplit_fit.inc"
