// Numeric option validators (option_checks.h).
#include "option_checks.h"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>

namespace bitsplit::cli {
namespace {

std::optional<int64_t> parse_whole(const std::string& text) {
  int64_t v = 0;
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if (begin != end && *begin == '+') ++begin;
  auto [ptr, ec] = std::from_chars(begin, end, v);
  if (ec != std::errc() || ptr != end || begin == end) return std::nullopt;
  return v;
}

std::optional<double> parse_real(const std::string& text) {
  if (text.empty() || std::isspace(static_cast<unsigned char>(text.front()))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size()) return std::nullopt;
  return v;
}

// %g keeps bounds short: 100, 0.5, 1e+30.
std::string short_number(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", v);
  return buf;
}

std::string whole_check(const std::string& text, int64_t lo, std::optional<int64_t> hi) {
  auto v = parse_whole(text);
  if (!v) {
    // A number too large for 64 bits is still a number: say it is out of range.
    const bool digits = !text.empty() && text.find_first_not_of("+-0123456789") == std::string::npos;
    if (!digits) return "'" + text + "' is not a whole number";
    return text + " is out of range" + (hi ? " (" + std::to_string(lo) + ".." + std::to_string(*hi) + ")" : "");
  }
  if (*v < lo) return text + " is below the minimum " + std::to_string(lo);
  if (hi && *v > *hi) return text + " is above the maximum " + std::to_string(*hi);
  return "";
}

std::string real_check(const std::string& text, double lo, std::optional<double> hi, bool open_low) {
  auto v = parse_real(text);
  if (!v) return "'" + text + "' is not a number";
  if (!std::isfinite(*v)) return text + " is not a finite number";
  if (open_low ? *v <= lo : *v < lo) return text + (open_low ? " must be greater than " : " is below the minimum ") + short_number(lo);
  if (hi && *v > *hi) return text + " is above the maximum " + short_number(*hi);
  return "";
}

}  // namespace

CLI::Validator whole_in(int64_t lo, int64_t hi) {
  return CLI::Validator([lo, hi](std::string& s) { return whole_check(s, lo, hi); },
                        "INT in " + std::to_string(lo) + ".." + std::to_string(hi));
}

CLI::Validator whole_at_least(int64_t lo) {
  return CLI::Validator([lo](std::string& s) { return whole_check(s, lo, std::nullopt); }, "INT >= " + std::to_string(lo));
}

CLI::Validator real_in(double lo, double hi) {
  return CLI::Validator([lo, hi](std::string& s) { return real_check(s, lo, hi, false); },
                        "NUMBER in " + short_number(lo) + ".." + short_number(hi));
}

CLI::Validator real_above(double lo) {
  return CLI::Validator([lo](std::string& s) { return real_check(s, lo, std::nullopt, true); }, "NUMBER > " + short_number(lo));
}

CLI::Validator seed_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v = 0;
        auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc() || ptr != s.data() + s.size()) {
          return "'" + s + "' is not a seed (a whole number 0.." + std::to_string(std::numeric_limits<uint64_t>::max()) + ")";
        }
        return "";
      },
      "UINT64");
}

}  // namespace bitsplit::cli
