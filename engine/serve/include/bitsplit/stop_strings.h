// Stop strings for streamed text: text is released as soon as it cannot be the start of a stop
// string, and generation stops at the first complete one (which is not emitted).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace bitsplit::serve {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}
  // Adds generated text; returns the text now safe to emit.
  std::string push(std::string_view text);
  // True once a stop string was seen (push returns what preceded it, then nothing).
  bool stopped() const { return stopped_; }
  // The text held back at the end of generation (a partial stop string that never completed).
  std::string flush();

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace bitsplit::serve
