// What a device needs of a draft model (Backend::make_device_draft's description): every
// projection and the head as a 2-bit plane in the file layout (keyed by its SplitProjection,
// as the CUDA backend uploads them), f32 embedding, norms and biases. An error names the first
// thing missing (a projection held in f32, a plane of another width, the draft's file layout
// released, mixed group sizes). With a variant, its sign planes join the planes (keyed by their
// data, as the CUDA backend's make_signs_resident keys them) and its norms and biases replace
// the base's; a variant replacing anything else in full is an error (it then drafts on the host).
#pragma once

#include "bitsplit/gpu.h"
#include "bitsplit/model.h"
#include "bitsplit/status.h"

namespace bitsplit {

class Variant;

// `context`: the positions the sequence is meant to reach (KvCache::context()); a LongRoPE
// model's draft carries the factor set it picks (Model::rope_freq_factors).
Result<gpu::DraftModelHost> describe_device_draft(const Model& draft, const Variant* variant, int64_t context);

}  // namespace bitsplit
