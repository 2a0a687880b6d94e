// Output path checks (output_path.h).
#include "output_path.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace bitsplit::cli {

Status check_output_path(const std::string& out, const std::vector<std::string>& inputs, const std::string& what) {
  if (out.empty()) return Status::error(what + " is empty");
  struct stat o {};
  if (::stat(out.c_str(), &o) == 0) {
    if (!S_ISREG(o.st_mode)) {
      return Status::error(what + " '" + out + "' is not a regular file (" +
                           (S_ISDIR(o.st_mode) ? "a directory" : S_ISCHR(o.st_mode) || S_ISBLK(o.st_mode) ? "a device" : S_ISFIFO(o.st_mode) ? "a FIFO" : "not a plain file") +
                           "); writers replace their output whole, so give a file path");
    }
    for (const std::string& in : inputs) {
      struct stat i {};
      if (!in.empty() && ::stat(in.c_str(), &i) == 0 && i.st_dev == o.st_dev && i.st_ino == o.st_ino) {
        return Status::error(what + " '" + out + "' is the input '" + in +
                             "': writing it would destroy the input; give another output path");
      }
    }
  }
  std::filesystem::path dir = std::filesystem::path(out).parent_path();
  if (dir.empty()) dir = ".";
  struct stat d {};
  if (::stat(dir.c_str(), &d) != 0 || !S_ISDIR(d.st_mode)) {
    return Status::error(what + " '" + out + "': the directory '" + dir.string() + "' does not exist");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    return Status::error(what + " '" + out + "': cannot write into '" + dir.string() + "' (" + std::strerror(errno) + ")");
  }
  return Status::ok();
}

}  // namespace bitsplit::cli
