// Stand-ins for builds without CUDA: every call says that this build has no GPU support.
#include "bitsplit/gpu.h"

namespace bitsplit::gpu {

namespace {
Status no_cuda() { return Status::error("this build of bitsplit has no CUDA support (configure with -DBITSPLIT_CUDA=ON)"); }
}  // namespace

bool compiled_with_cuda() { return false; }
int device_count() { return 0; }
Result<std::string> describe_device(int) { return no_cuda(); }
Result<uint64_t> free_memory(int) { return no_cuda(); }
Status rms_norm(const float*, const float*, int64_t, int64_t, float, float*, int) {
  return no_cuda();
}
Result<std::unique_ptr<DraftMatmul>> DraftMatmul::create(int) { return no_cuda(); }
Result<std::unique_ptr<DraftModel>> DraftModel::create(DraftMatmul&, const DraftModelHost&, int64_t, int64_t) {
  return no_cuda();
}
Result<double> measure_copy_bandwidth(uint64_t, int, int) { return no_cuda(); }

}  // namespace bitsplit::gpu
