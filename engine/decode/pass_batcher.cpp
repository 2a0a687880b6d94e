// The pass batcher: group commit of forward passes from concurrent generations.
#include "bitsplit/pass_batcher.h"

#include <exception>
#include <map>
#include <utility>

namespace bitsplit {

struct PassBatcher::Job {
  // A pass (work empty) or exclusive work.
  const Model* model = nullptr;
  KvCache* cache = nullptr;
  const Batch* batch = nullptr;
  Pass pass = Pass::kDefault;
  const Variant* variant = nullptr;
  const std::function<Status()>* work = nullptr;
  // Filled by the leader.
  Status status;
  std::vector<float> logits;
  bool done = false;
};

PassBatcher::Membership::Membership(PassBatcher* batcher) : batcher_(batcher) {
  if (!batcher_) return;
  std::lock_guard<std::mutex> lock(batcher_->mu_);
  ++batcher_->joined_;
}

PassBatcher::Membership::~Membership() {
  if (!batcher_) return;
  {
    std::lock_guard<std::mutex> lock(batcher_->mu_);
    --batcher_->joined_;
  }
  batcher_->cv_.notify_all();  // a leader waiting for this generation's pass stops waiting
}

Status PassBatcher::submit(Job& job) {
  std::unique_lock<std::mutex> lock(mu_);
  pending_.push_back(&job);
  cv_.notify_all();
  while (!job.done) {
    if (leading_) {
      cv_.wait(lock);
      continue;
    }
    leading_ = true;
    cv_.wait_for(lock, options_.gather, [&] { return int64_t(pending_.size()) >= joined_; });
    std::vector<Job*> jobs = std::move(pending_);
    pending_.clear();
    lock.unlock();
    execute(jobs);
    lock.lock();
    leading_ = false;
    cv_.notify_all();
  }
  return job.status;
}

void PassBatcher::execute(std::vector<Job*>& jobs) {
  // Whatever happens, every job is answered (a waiting thread must never hang).
  auto fail_all = [](std::vector<Job*>& group, const Status& st) {
    for (Job* j : group) j->status = st;
  };
  std::map<std::pair<const Model*, Pass>, std::vector<Job*>> passes;
  for (Job* job : jobs) {
    if (job->work) {
      try {
        job->status = (*job->work)();
      } catch (const std::exception& e) {
        job->status = Status::error(std::string("internal error: ") + e.what());
      } catch (...) {
        job->status = Status::error("internal error: an exception that is not a std::exception");
      }
      continue;
    }
    const Pass pass = job->pass == Pass::kDefault ? job->model->default_pass() : job->pass;
    // A batch that cannot run fails alone, not the passes it would have joined.
    if (Status st = job->batch->validate(job->model->config(), *job->cache); !st) {
      job->status = st;
      continue;
    }
    passes[{job->model, pass}].push_back(job);
  }
  int64_t passes_run = 0, sequences = 0, rows = 0, shared = 0;
  for (auto& [key, group] : passes) {
    for (size_t first = 0; first < group.size();) {
      // Whole sequences up to max_rows (at least one).
      size_t last = first;
      int64_t n = 0;
      while (last < group.size() && (last == first || n + group[last]->batch->size() <= options_.max_rows)) {
        n += group[last]->batch->size();
        ++last;
      }
      std::vector<Job*> part(group.begin() + long(first), group.begin() + long(last));
      std::vector<SequencePass> seqs;
      for (Job* j : part) seqs.push_back({j->cache, j->batch, j->variant});
      try {
        auto logits = forward_passes(*key.first, seqs, key.second);
        if (!logits) {
          fail_all(part, logits.status());
        } else {
          for (size_t i = 0; i < part.size(); ++i) part[i]->logits = std::move((*logits)[i]);
        }
      } catch (const std::exception& e) {
        fail_all(part, Status::error(std::string("internal error: ") + e.what()));
      } catch (...) {
        fail_all(part, Status::error("internal error: an exception that is not a std::exception"));
      }
      ++passes_run;
      sequences += int64_t(part.size());
      rows += n;
      if (part.size() > 1) shared += int64_t(part.size());
      first = last;
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  stats_.passes += passes_run;
  stats_.sequences += sequences;
  stats_.rows += rows;
  stats_.shared += shared;
  for (Job* job : jobs) job->done = true;
}

Result<std::vector<float>> PassBatcher::forward(const Model& model, KvCache& cache, const Batch& batch, Pass pass,
                                                const Variant* variant) {
  Job job;
  job.model = &model;
  job.cache = &cache;
  job.batch = &batch;
  job.pass = pass;
  job.variant = variant;
  BITSPLIT_RETURN_IF_ERROR(submit(job));
  return std::move(job.logits);
}

Status PassBatcher::exclusive(const std::function<Status()>& work) {
  Job job;
  job.work = &work;
  return submit(job);
}

int64_t PassBatcher::joined() const {
  std::lock_guard<std::mutex> lock(mu_);
  return joined_;
}

PassBatcher::Stats PassBatcher::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

Result<std::vector<float>> run_forward(PassBatcher* batcher, const Model& model, KvCache& cache, const Batch& batch,
                                       Pass pass, const Variant* variant) {
  if (batcher) return batcher->forward(model, cache, batch, pass, variant);
  return forward_pass(model, cache, batch, nullptr, pass, variant);
}

}  // namespace bitsplit
