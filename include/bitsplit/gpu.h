// gpu/: CUDA kernels and device management. This header never exposes CUDA types, so the
// engine compiles the same with or without CUDA; without it every call reports that plainly.
// It is C++17 (no std::span) because the CUDA sources that include it are compiled as C++17.
#pragma once

#include <cstdint>
#include <string>

#include "bitsplit/status.h"

namespace bitsplit::gpu {

// True when this build contains CUDA kernels.
bool compiled_with_cuda();
// Number of usable CUDA devices (0 without CUDA, without a driver, or without a device).
int device_count();
// "NVIDIA H200 (sm_90, 139 GiB)"; an error when the device does not exist.
Result<std::string> describe_device(int device);

// Row-wise RMSNorm on the device: y[r] = x[r] / sqrt(mean(x[r]^2) + eps) * weight, for
// `rows` rows of length n. Host launcher: copies in, runs, copies out.
// x and y hold rows * n floats, weight n floats (host memory).
Status rms_norm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* y, int device = 0);

}  // namespace bitsplit::gpu
