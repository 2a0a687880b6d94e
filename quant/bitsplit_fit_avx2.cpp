// The bit-split fit (bitsplit_fit.inc) compiled for AVX2; bit-identical with split_row_ref.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "bitsplit/isa_target.h"
#include "bitsplit/quant.h"
#include "bitsplit/status.h"

// The fit is compiled for the tier (bitsplit/isa_target.h); every header it uses is above.
BITSPLIT_TARGET_BEGIN(BITSPLIT_ISA_FIT_AVX2)

#define BITSPLIT_FIT_NS fit_avx2
#include "bitsplit_fit.inc"

BITSPLIT_TARGET_END
