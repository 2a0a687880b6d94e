// Stop strings (stop_strings.h).
#include "bitsplit/stop_strings.h"

#include <algorithm>

namespace bitsplit::serve {

std::string StopMatcher::push(std::string_view text) {
  if (stopped_) return "";
  held_ += text;
  // The earliest complete stop string ends the text.
  size_t cut = std::string::npos;
  for (const auto& s : stops_) cut = std::min(cut, held_.find(s));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, cut);
    held_.clear();
    return out;
  }
  // Hold back the longest tail that is a prefix of some stop string.
  size_t keep = 0;
  for (const auto& s : stops_) {
    for (size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n) {
      if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
        keep = n;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::flush() {
  if (stopped_) return "";
  std::string out = std::move(held_);
  held_.clear();
  return out;
}

}  // namespace bitsplit::serve
