// What the C API's source files share (internal, not installed): the model handle's contents,
// the last-error message, the status helpers and the versioned-struct size rule (bitsplit.h,
// Conventions).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <initializer_list>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "bitsplit/bitsplit.h"
#include "bitsplit/loaded_model.h"
#include "bitsplit/session.h"
#include "bitsplit/variant.h"

struct bitsplit_model {
  bitsplit::LoadedModel loaded;
  std::unique_ptr<bitsplit::VariantRegistry> variants;
  // Sessions generating at once on the model: their forward passes run combined (one pass over
  // the weights for all their rows; the model's CpuContext is driven by one thread at a time).
  bitsplit::PassBatcher batcher;
  uint64_t locked_bytes = 0;  // planes locked in RAM (bitsplit_model_params.mlock)
  // Strings handed out (metadata values, variant names): kept for the model's life so the
  // pointers stay valid, as the header promises.
  std::mutex strings_mu;
  std::map<std::string, std::string> strings;
};

namespace bitsplit::capi {

// The message of the calling thread's last failure (bitsplit_last_error).
std::string& last_error();

inline bitsplit_status fail(bitsplit_status status, const std::string& message) {
  last_error() = message;
  return status;
}

inline bitsplit_status invalid(const std::string& message) { return fail(BITSPLIT_ERR_INVALID_ARGUMENT, message); }

// Runs `body`, turning exceptions into statuses: no exception leaves the C API.
template <typename Body>
bitsplit_status guarded(Body&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(BITSPLIT_ERR_OUT_OF_MEMORY, "out of memory");
  } catch (const std::exception& e) {
    return fail(BITSPLIT_ERR_INTERNAL, std::string("internal error: ") + e.what());
  } catch (...) {
    return fail(BITSPLIT_ERR_INTERNAL, "internal error");
  }
}

// Each versioned struct's accepted sizes (bitsplit.h, Conventions): an error naming the struct and
// the size for one below its first version or ending inside a field.
Status check_size(const bitsplit_model_params& p);
Status check_size(const bitsplit_session_params& p);
Status check_size(const bitsplit_generation_stats& s);
Status check_size(const bitsplit_chat_params& p);

// A caller's parameters over the defaults: the whole fields its struct has (checked by size).
template <typename T>
Result<T> read_params(const T* given, const T& defaults) {
  T out = defaults;
  if (!given) return out;
  BITSPLIT_RETURN_IF_ERROR(check_size(*given));
  std::memcpy(static_cast<void*>(&out), given, std::min(given->size, sizeof(T)));
  out.size = sizeof(T);
  return out;
}

// Copies `items` into the caller's buffer of `capacity`, or fails with the size needed in *count.
template <typename T>
bitsplit_status copy_out(const std::vector<T>& items, T* out, size_t capacity, size_t* count, const char* what) {
  *count = items.size();
  if (items.size() > capacity) {
    return fail(BITSPLIT_ERR_BUFFER_TOO_SMALL, std::string(what) + " needs room for " + std::to_string(items.size()) +
                                                   ", the buffer has " + std::to_string(capacity));
  }
  std::copy(items.begin(), items.end(), out);
  return BITSPLIT_OK;
}

// `text` kept by the model under `slot` for the model's life (the first text stored there wins:
// what was handed out never changes); its stable address.
const char* keep_string(bitsplit_model& model, const std::string& slot, std::string text);

}  // namespace bitsplit::capi
