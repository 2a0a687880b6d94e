// CUDA device discovery and the RAII device buffer shared by the kernels' host launchers.
#include <cuda_runtime.h>

#include "bitsplit/gpu.h"

namespace bitsplit::gpu {

bool compiled_with_cuda() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver / no device" error
    return 0;
  }
  return n;
}

Result<std::string> describe_device(int device) {
  if (device < 0 || device >= device_count()) {
    return Status::error("CUDA device " + std::to_string(device) + " does not exist (" +
                         std::to_string(device_count()) + " found)");
  }
  cudaDeviceProp prop{};
  if (cudaError_t e = cudaGetDeviceProperties(&prop, device); e != cudaSuccess) {
    return Status::error(std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(e));
  }
  return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
         std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
}

Result<uint64_t> free_memory(int device) {
  if (device < 0 || device >= device_count()) return Status::error("CUDA device " + std::to_string(device) + " does not exist");
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) return Status::error(std::string("cudaSetDevice: ") + cudaGetErrorString(e));
  size_t free = 0, total = 0;
  if (cudaError_t e = cudaMemGetInfo(&free, &total); e != cudaSuccess) {
    return Status::error(std::string("cudaMemGetInfo: ") + cudaGetErrorString(e));
  }
  return uint64_t(free);
}

}  // namespace bitsplit::gpu
