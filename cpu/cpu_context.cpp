// CpuContext (hwloc topology, oneTBB arena pinned one worker per physical core, ISA tier),
// runtime ISA selection, and NUMA/THP-aware plane buffers.
#include <cpuid.h>
#include <hwloc.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <tbb/blocked_range.h>
#include <tbb/global_control.h>
#include <tbb/parallel_for.h>
#include <tbb/partitioner.h>
#include <tbb/task_arena.h>
#include <tbb/task_scheduler_observer.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "bitsplit/status.h"
#include "activation_chunks.h"
#include "plane_kernels.h"

namespace bitsplit::cpu {

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return "scalar";
    case Isa::kAvx2: return "avx2";
    case Isa::kAvx512: return "avx512";
    case Isa::kAmx: return "amx";
  }
  return "?";
}

namespace {
// Linux keeps the AMX tile data out of a process's saved state until it asks for it
// (arch/x86/include/uapi/asm/prctl.h: ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA); without that the
// first tile instruction faults. Asked once; refused on kernels before 5.16 or under a hypervisor
// that does not pass the state through.
bool amx_permitted() {
  static const bool granted = [] {
    constexpr long kReqXcompPerm = 0x1023, kXtileData = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtileData) == 0;
  }();
  return granted;
}

// AMX-TILE and AMX-INT8 from CPUID leaf 7 (EDX bits 24 and 25). Read directly: clang 14's
// __builtin_cpu_supports does not know the "amx-*" names (a compile error, not a false).
bool cpu_has_amx_int8() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  constexpr unsigned kAmxTile = 1u << 24, kAmxInt8 = 1u << 25;
  return (edx & kAmxTile) && (edx & kAmxInt8);
}

// F16C from CPUID leaf 1 (ECX bit 29), read directly for the same reason ("f16c" is unknown to it).
bool cpu_has_f16c() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
  return ecx & (1u << 29);
}
}  // namespace

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::kScalar: return true;
    // Every instruction set the tier's region names (bitsplit/isa_target.h).
    case Isa::kAvx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
    case Isa::kAvx512:
      return isa_supported(Isa::kAvx2) && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    case Isa::kAmx:
      return isa_supported(Isa::kAvx512) && cpu_has_amx_int8() && amx_permitted();
  }
  return false;
}

Isa default_isa() {
  static const Isa chosen = [] {
    Isa best = Isa::kScalar;
    for (Isa i : kIsaTiers)
      if (isa_supported(i)) best = i;
    if (const char* env = std::getenv("BITSPLIT_ISA")) {
      Isa forced = best;
      for (Isa i : kIsaTiers)
        if (std::string(env) == isa_name(i)) forced = i;
      // A tier the CPU lacks cannot be forced: keep the best one it has.
      if (isa_supported(forced)) best = forced;
    }
    return best;
  }();
  return chosen;
}

namespace {

// One hwloc topology, destroyed with the context.
struct Topology {
  hwloc_topology_t handle = nullptr;
  Topology() {
    BITSPLIT_CHECK(hwloc_topology_init(&handle) == 0);
    BITSPLIT_CHECK(hwloc_topology_load(handle) == 0);
  }
  ~Topology() { hwloc_topology_destroy(handle); }
  Topology(const Topology&) = delete;
  Topology& operator=(const Topology&) = delete;
};

// Binds each arena worker (slots 1 ..) to its own physical core as it joins. Slot 0 is the
// calling thread: it is left unbound, so a context never changes its creator's affinity.
class PinObserver : public tbb::task_scheduler_observer {
 public:
  PinObserver(tbb::task_arena& arena, hwloc_topology_t topo, int cores)
      : tbb::task_scheduler_observer(arena), topo_(topo), cores_(cores) {
    observe(true);
  }
  ~PinObserver() override { observe(false); }
  void on_scheduler_entry(bool worker) override {
    const int slot = tbb::this_task_arena::current_thread_index();
    if (!worker || slot <= 0 || cores_ <= 0) return;
    hwloc_obj_t core = hwloc_get_obj_by_type(topo_, HWLOC_OBJ_CORE, unsigned(slot % cores_));
    if (core) hwloc_set_cpubind(topo_, core->cpuset, HWLOC_CPUBIND_THREAD);
  }

 private:
  hwloc_topology_t topo_;
  int cores_;
};

std::string transparent_hugepage_mode() {
  std::ifstream f("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string line;
  std::getline(f, line);
  return line.empty() ? "unknown" : line;
}

}  // namespace

struct CpuContext::Impl {
  Topology topo;
  CpuTopology info;
  const detail::KernelTable* kernels = nullptr;
  int threads = 1;
  bool pinned = false;
  std::unique_ptr<tbb::task_arena> arena;
  std::unique_ptr<PinObserver> observer;

  // Threads that can run in the arena now: the caller and the workers oneTBB may start, which a
  // tbb::global_control (the CLI's --threads) or the machine's CPUs can keep below `threads`.
  int runnable_threads() const {
    const size_t allowed = tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism);
    return int(std::min<size_t>(size_t(threads), allowed));
  }
};

CpuContext::CpuContext() : CpuContext(Options{}) {}

CpuContext::CpuContext(const Options& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  hwloc_topology_t t = m.topo.handle;
  m.info.packages = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PACKAGE));
  m.info.numa_nodes = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_NUMANODE));
  m.info.physical_cores = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_CORE));
  m.info.logical_cpus = std::max(1, hwloc_get_nbobjs_by_type(t, HWLOC_OBJ_PU));
  const Isa isa = options.isa.value_or(default_isa());
  BITSPLIT_CHECK(isa_supported(isa), std::string("ISA tier not supported by this CPU: ") + isa_name(isa));
  m.kernels = &detail::kernels_for(isa);
  m.threads = options.threads > 0 ? options.threads : m.info.physical_cores;
  if (m.threads > 1) {
    m.arena = std::make_unique<tbb::task_arena>(m.threads);
    m.arena->initialize();
    if (options.pin) {
      m.observer = std::make_unique<PinObserver>(*m.arena, t, m.info.physical_cores);
      m.pinned = true;
    }
  }
}

CpuContext::~CpuContext() {
  if (impl_) impl_->observer.reset();
}

Isa CpuContext::isa() const { return impl_->kernels->isa; }
int CpuContext::threads() const { return impl_->threads; }
const CpuTopology& CpuContext::topology() const { return impl_->info; }

std::string CpuContext::describe() const {
  const Impl& m = *impl_;
  std::string supported;
  for (Isa i : kIsaTiers)
    if (isa_supported(i)) supported += std::string(supported.empty() ? "" : " ") + isa_name(i);
  std::string s;
  s += "packages:      " + std::to_string(m.info.packages) + "\n";
  s += "numa nodes:    " + std::to_string(m.info.numa_nodes) + "\n";
  s += "cores:         " + std::to_string(m.info.physical_cores) + " physical, " +
       std::to_string(m.info.logical_cpus) + " logical\n";
  s += "isa tier:      " + std::string(isa_name(isa())) + " (supported: " + supported + ")\n";
  s += "arena:         " + std::to_string(m.threads) + " thread" + (m.threads == 1 ? "" : "s") +
       (m.pinned ? ", workers pinned one per physical core" : ", unpinned") + "\n";
  s += "plane memory:  " + std::string(m.info.numa_nodes > 1 ? "interleaved over NUMA nodes" : "single NUMA node") +
       ", MADV_HUGEPAGE (transparent_hugepage: " + transparent_hugepage_mode() + ")\n";
  return s;
}

void CpuContext::run_slices(int64_t items, int64_t align, const std::function<void(int64_t, int64_t)>& body) {
  if (items <= 0) return;
  const int64_t units = (items + align - 1) / align;
  const int slices = int(std::min<int64_t>(impl_->threads, units));
  auto slice = [&](int w) {
    const int64_t b = std::min(items, units * w / slices * align);
    const int64_t e = std::min(items, units * (w + 1) / slices * align);
    if (b < e) body(b, e);
  };
  auto slices_in = [&](const tbb::blocked_range<int>& r) {
    for (int w = r.begin(); w != r.end(); ++w) slice(w);
  };
  const int runnable = impl_->runnable_threads();
  if (slices <= 1 || !impl_->arena || runnable <= 1) {
    slices_in({0, slices});
    return;
  }
  impl_->arena->execute([&] {
    // static_partitioner mails each slice to its own arena slot (worker w, pinned to core w, gets
    // the same rows every call), and a mailed task is freed only once a thread in that slot reads
    // its mail. When fewer threads can run than the arena has slots, some slots may never get one:
    // their mail grows by ~256 bytes a call for the life of the process (`serve -t 1` on a machine
    // with more cores: 0.1 MiB a generated token, issue 43). Then the slices go unmailed to
    // whichever threads there are.
    const tbb::blocked_range<int> all(0, slices, 1);
    if (runnable >= impl_->threads) tbb::parallel_for(all, slices_in, tbb::static_partitioner());
    else tbb::parallel_for(all, slices_in, tbb::simple_partitioner());
  });
}

namespace detail {
const KernelTable& kernels_of(const CpuContext& ctx) { return kernels_for(ctx.isa()); }
const KernelTable& kernels_for(Isa isa) {
  switch (isa) {
    case Isa::kAmx: return amx_kernels();
    case Isa::kAvx512: return avx512_kernels();
    case Isa::kAvx2: return avx2_kernels();
    case Isa::kScalar: break;
  }
  return scalar_kernels();
}
}  // namespace detail

// ---- plane buffers ----

namespace {
constexpr size_t kHugePage = size_t(2) << 20, kPage = 4096;
}

PlaneBuffer::PlaneBuffer(CpuContext& ctx, size_t bytes, bool whole_huge_pages) {
  if (bytes == 0) return;
  const size_t unit = whole_huge_pages ? kHugePage : kPage;
  mapped_ = (bytes + unit - 1) / unit * unit;
  void* p = std::aligned_alloc(unit, mapped_);
  BITSPLIT_CHECK(p != nullptr, "out of memory allocating a plane buffer");
  // A request: without THP the buffer still works. Only whole 2 MiB-aligned pages inside the
  // buffer, so a huge page never spans memory the buffer does not use.
  const uintptr_t begin = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) / kHugePage * kHugePage;
  const uintptr_t end = (reinterpret_cast<uintptr_t>(p) + mapped_) / kHugePage * kHugePage;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);
  if (ctx.topology().numa_nodes > 1) {
    // Interleave pages so every core's slice streams from all memory controllers. The topology
    // of a fresh hwloc handle is enough for the node set.
    Topology topo;
    hwloc_set_area_membind(topo.handle, p, mapped_, hwloc_topology_get_topology_nodeset(topo.handle),
                           HWLOC_MEMBIND_INTERLEAVE, HWLOC_MEMBIND_BYNODESET);
  }
  data_ = static_cast<uint8_t*>(p);
  size_ = bytes;
}

PlaneBuffer::~PlaneBuffer() { std::free(data_); }

PlaneBuffer::PlaneBuffer(PlaneBuffer&& o) noexcept : data_(o.data_), size_(o.size_), mapped_(o.mapped_) {
  o.data_ = nullptr;
  o.size_ = o.mapped_ = 0;
}

PlaneBuffer& PlaneBuffer::operator=(PlaneBuffer&& o) noexcept {
  if (this != &o) {
    std::free(data_);
    data_ = o.data_;
    size_ = o.size_;
    mapped_ = o.mapped_;
    o.data_ = nullptr;
    o.size_ = o.mapped_ = 0;
  }
  return *this;
}

// ---- dispatching entry points ----

void quantize_activations(CpuContext& ctx, const float* x, int64_t rows, int64_t in, int group,
                          QuantizedActivations& qa) {
  qa.resize(rows, in, group);
  const auto& k = detail::kernels_of(ctx);
  // Rows are independent: a prompt chunk's are split across the threads (one row stays inline).
  // (A tier's group quantiser takes groups of a multiple of 16; its `quantize` uses the scalar
  // one for the others, as here.)
  if (rows < 16) return k.quantize(x, rows, in, group, qa);
  const detail::GroupQuantizer fn = group % 16 == 0 ? k.quantize_group : detail::quantize_group_ref;
  ctx.run_slices(rows, 1, [&](int64_t b, int64_t e) { detail::quantize_rows(x, e, in, group, qa, fn, b); });
}

void quantize_activations_with_remainder(CpuContext& ctx, const float* x, int64_t rows, int64_t in, int group,
                                         QuantizedActivations& qa) {
  qa.resize(2 * rows, in, group);
  const auto& k = detail::kernels_of(ctx);
  const detail::GroupQuantizer fn = group % 16 == 0 ? k.quantize_group : detail::quantize_group_ref;
  // Row by row: its int8 row (as quantize_activations), e = x - s·q group by group (one rounded
  // product, one rounded difference) in a row of scratch, and e's int8 row at rows + n.
  auto with_remainder = [&](int64_t first, int64_t last) {
    std::vector<float> e(static_cast<size_t>(in));
    for (int64_t n = first; n < last; ++n) {
      detail::quantize_rows(x, n + 1, in, group, qa, fn, n);
      const int8_t* q = qa.row_q(n);
      const float* xn = x + n * in;
      for (int64_t g = 0; g < qa.groups; ++g) {
        const float s = qa.scale[size_t(n * qa.groups + g)];
        for (int64_t i = g * group; i < std::min<int64_t>(in, (g + 1) * group); ++i) e[size_t(i)] = xn[i] - s * float(q[i]);
      }
      detail::quantize_rows(e.data(), 1, in, group, qa, fn, 0, rows + n);
    }
  };
  if (rows < 16) with_remainder(0, rows);
  else ctx.run_slices(rows, 1, with_remainder);
}

void residual_matmul(CpuContext& ctx, const ResidualPlaneView& r, const QuantizedActivations& qa, float* y) {
  BITSPLIT_CHECK(qa.in == r.in && qa.group == r.group && (r.bits == 8 || r.bits == 6));
  const auto& k = detail::kernels_of(ctx);
  ctx.run_slices(r.out, 16, [&](int64_t b, int64_t e) { k.residual(r, qa, b, e, y); });
}

void draft_matmul(CpuContext& ctx, const DraftPlaneView& d, const QuantizedActivations& qa, float* y,
                  const SignPlaneView* delta) {
  BITSPLIT_CHECK(qa.in == d.in && qa.group == d.group && (d.bits == 2 || d.bits == 3 || d.bits == 4));
  detail::check_delta(d, delta);
  const auto& k = detail::kernels_of(ctx);
  ctx.run_slices(d.out, 16, [&](int64_t b, int64_t e) { k.draft(d, qa, b, e, y, delta); });
}

void target_matmul(CpuContext& ctx, const DraftPlaneView& d, const ResidualPlaneView& r,
                   const QuantizedActivations& qa, float* y, std::vector<float>& scratch, const SignPlaneView* delta) {
  BITSPLIT_CHECK(d.out == r.out && d.in == r.in);
  scratch.resize(size_t(qa.rows * r.out));
  draft_matmul(ctx, d, qa, y, delta);
  residual_matmul(ctx, r, qa, scratch.data());
  for (size_t i = 0; i < scratch.size(); ++i) y[i] = y[i] + scratch[i];
}

void sign_delta_accumulate(CpuContext& ctx, const SignPlaneView& s, const QuantizedActivations& qa, float* y) {
  ctx.run_slices(s.out, 16, [&](int64_t b, int64_t e) { detail::sign_rows_ref(s, qa, b, e, y); });
}

}  // namespace bitsplit::cpu
