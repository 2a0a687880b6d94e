// Memory plans (memory_plan.h).
#include "bitsplit/memory_plan.h"

#include <hwloc.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "bitsplit/split_format.h"
#include "bitsplit/vram_plan.h"

namespace bitsplit {
namespace {

bool ends_with_any(const std::string& name, std::initializer_list<const char*> suffixes) {
  for (const char* s : suffixes)
    if (name.ends_with(s)) return true;
  return false;
}

// A number from a line "Key:   123 kB" of /proc/meminfo (bytes), or 0.
uint64_t meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key + ":", 0) != 0) continue;
    std::istringstream s(line.substr(key.size() + 1));
    uint64_t kb = 0;
    s >> kb;
    return kb * 1024;
  }
  return 0;
}

// The cgroup v2 limit left for this process (memory.max - memory.current), or 0 for none.
uint64_t cgroup_room() {
  std::ifstream max_file("/sys/fs/cgroup/memory.max"), current_file("/sys/fs/cgroup/memory.current");
  std::string max_text;
  uint64_t current = 0;
  if (!(max_file >> max_text) || max_text == "max" || !(current_file >> current)) return 0;
  const uint64_t max = std::strtoull(max_text.c_str(), nullptr, 10);
  return max > current ? max - current : 1;
}

int numa_nodes() {
  hwloc_topology_t t = nullptr;
  if (hwloc_topology_init(&t) != 0) return 1;
  int n = 1;
  if (hwloc_topology_load(t) == 0) n = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE));
  hwloc_topology_destroy(t);
  return n;
}

}  // namespace

// "residual 1.02 GiB, draft ..., scratch 2 MiB": the terms of the plan.
std::string MemoryPlan::terms() const {
  std::string s;
  if (residual > 0) s += "residual " + format_bytes(residual) + ", draft " + format_bytes(draft) + ", other weights ";
  else s += "weights ";
  const std::string caches = sequences > 1 ? std::to_string(sequences) + " x " : "";
  s += format_bytes(weights) + ", KV cache (" + caches + std::to_string(n_slots) + " positions) " + format_bytes(kv_cache) +
       ", scratch " + format_bytes(scratch);
  return s;
}

std::string MemoryPlan::summary() const { return format_bytes(total()) + ": " + terms(); }

std::string SystemMemory::summary() const {
  return format_bytes(available) + " available of " + format_bytes(total) + ", " + std::to_string(numa_nodes) +
         (numa_nodes == 1 ? " NUMA node" : " NUMA nodes");
}

Result<MemoryPlan> plan_memory(const WeightSource& source, const ModelConfig& config, const MemoryPlanOptions& options) {
  BITSPLIT_ASSIGN_OR_RETURN(auto split, read_split_format(source.metadata()));
  MemoryPlan plan;
  for (const auto& t : source.tensors()) {
    if (split && is_residual_plane_tensor(t.name)) {
      plan.residual += t.nbytes;
    } else if (split && ends_with_any(t.name, {".draft_codes", ".draft_scales", ".draft_offsets"})) {
      plan.draft += t.nbytes;
    } else if (!split && options.q8_0_kernels && t.type == gguf::TensorType::Q8_0 && is_split_projection(t.name)) {
      plan.weights += t.nbytes;  // kept as blocks for the Q8_0 kernel
    } else if (split && t.name == "token_embd.weight" && t.type == gguf::TensorType::Q8_0 &&
               config.n_embd % quant::BlockQ8_0::kWeights == 0) {
      plan.weights += t.nbytes;  // a bit-split model keeps its Q8_0 embedding as blocks (Model::embed_row)
    } else {
      plan.weights += uint64_t(t.n_elements()) * sizeof(float);  // the loader converts to f32
      // A tied head over a Q8_0 embedding also keeps the embedding's blocks for the Q8_0 kernel.
      if (!split && options.q8_0_kernels && config.tied_output && t.name == "token_embd.weight" &&
          t.type == gguf::TensorType::Q8_0) {
        plan.weights += t.nbytes;
      }
    }
  }
  plan.n_slots = options.n_slots > 0 ? std::min(options.n_slots, config.n_ctx_train) : config.n_ctx_train;
  plan.sequences = std::max<int64_t>(1, options.sequences);
  plan.kv_cache = 2 * uint64_t(config.n_layers) * uint64_t(plan.n_slots) * uint64_t(config.kv_dim()) * sizeof(float) *
                  uint64_t(plan.sequences);
  plan.scratch = uint64_t(std::max<int64_t>(1, options.verify_rows)) * uint64_t(plan.sequences) * uint64_t(config.n_vocab) *
                 sizeof(float);
  return plan;
}

Result<SystemMemory> system_memory() {
  SystemMemory m;
  m.total = meminfo_bytes("MemTotal");
  m.available = meminfo_bytes("MemAvailable");
  if (m.total == 0 || m.available == 0) return Status::error("cannot read the machine's memory from /proc/meminfo");
  if (const uint64_t room = cgroup_room(); room > 0 && room < m.available) m.available = room;
  if (const char* env = std::getenv("BITSPLIT_MEMORY_AVAILABLE"); env && *env) {
    auto bytes = parse_byte_size(env);
    if (!bytes) return bytes.status().with_context("BITSPLIT_MEMORY_AVAILABLE");
    m.available = *bytes;
  }
  m.numa_nodes = numa_nodes();
  return m;
}

Status check_memory(const MemoryPlan& plan, const SystemMemory& memory) {
  if (plan.total() <= memory.available) return Status::ok();
  return Status::error("the model needs " + format_bytes(plan.total()) + " of RAM (" + plan.terms() + ") but " + format_bytes(memory.available) +
                       " is available (" + memory.summary() + "); free memory, generate fewer tokens, or use a "
                       "smaller residual (`bitsplit convert --residual 6`)");
}

}  // namespace bitsplit
