// Whole small files with a size bound (bounded_file.h).
#include "bounded_file.h"

#include <filesystem>
#include <fstream>
#include <iterator>

namespace bitsplit {

Result<std::string> read_bounded_file(const std::string& path, uint64_t max_bytes) {
  std::error_code ec;
  const auto status = std::filesystem::status(path, ec);
  if (ec || !std::filesystem::exists(status)) return Status::error(path + ": no such file");
  // A FIFO or a device would block or never end.
  if (!std::filesystem::is_regular_file(status)) return Status::error(path + ": not a regular file");
  const uint64_t size = std::filesystem::file_size(path, ec);
  if (ec) return Status::error(path + ": cannot read its size: " + ec.message());
  if (size > max_bytes) {
    return Status::error(path + ": is " + std::to_string(size) + " bytes, more than the " + std::to_string(max_bytes) +
                         " such a file may have");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::error(path + ": cannot open the file");
  std::string text(size, '\0');
  in.read(text.data(), std::streamsize(size));
  if (in.gcount() != std::streamsize(size)) return Status::error(path + ": read error");
  return text;
}

}  // namespace bitsplit
