// The checkpoint directory: naming, atomic publication, `latest`, retention,
// and finding the checkpoint a path names.
#include "io/checkpoint/checkpoint_fs.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.hpp"
#include "core/log.hpp"
#include "io/checkpoint/checkpoint.hpp"

namespace exa::io {

namespace fs = std::filesystem;

std::string checkpoint_dir_name(std::uint64_t step) { return fmt::format("step_{:08d}", step); }

namespace fs_detail {

std::string temp_dir_name(std::uint64_t step, long pid) {
  return fmt::format(".{}.tmp-{}", checkpoint_dir_name(step), pid);
}

std::optional<std::uint64_t> parse_step_name(const std::string& name) {
  constexpr std::size_t P = 5;  // "step_"
  if (name.size() < P + 8 || name.size() > P + 20 || name.compare(0, P, "step_") != 0) return std::nullopt;
  std::uint64_t v = 0;
  for (std::size_t i = P; i < name.size(); ++i) {
    const char c = name[i];
    if (c < '0' || c > '9') return std::nullopt;
    const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return std::nullopt;
    v = v * 10 + d;
  }
  return v;
}

bool is_work_name(const std::string& name) {
  if (name.compare(0, 6, ".step_") != 0) return false;
  return name.find(".tmp-") != std::string::npos || name.find(".old-") != std::string::npos ||
         name.find(".del-") != std::string::npos;
}

void fsync_path(const std::string& path) {
  const bool dir = fs::is_directory(path);
  const int fd = ::open(path.c_str(), dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
  EXA_REQUIRE(fd >= 0, "cannot open {} to flush it to disk: {}", path, std::strerror(errno));
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  // Some file systems refuse fsync on directories (EINVAL); their renames are
  // durable by other means.
  EXA_REQUIRE(rc == 0 || (dir && (err == EINVAL || err == EBADF)), "cannot flush {} to disk: {}", path,
              std::strerror(err));
}

namespace {

// renameat2(RENAME_EXCHANGE): swaps two paths atomically (Linux >= 3.15 on
// ext4, xfs, btrfs, tmpfs; not every network file system).
bool exchange_paths(const std::string& a, const std::string& b) {
#if defined(SYS_renameat2)
  constexpr unsigned kExchange = 1u << 1;  // RENAME_EXCHANGE
  return ::syscall(SYS_renameat2, AT_FDCWD, a.c_str(), AT_FDCWD, b.c_str(), kExchange) == 0;
#else
  (void)a;
  (void)b;
  return false;
#endif
}

void rename_or_throw(const std::string& from, const std::string& to) {
  if (std::rename(from.c_str(), to.c_str()) != 0) {
    throw Error(fmt::format("cannot rename {} to {}: {}", from, to, std::strerror(errno)));
  }
}

// Renames a directory to a work name and removes it.
void remove_dir_safely(const fs::path& dir, const char* tag) {
  const fs::path parent = dir.parent_path();
  const fs::path aside = parent / fmt::format(".{}.{}-{}", dir.filename().string(), tag, static_cast<long>(::getpid()));
  std::error_code ec;
  fs::remove_all(aside, ec);
  rename_or_throw(dir.string(), aside.string());
  fs::remove_all(aside);
}

}  // namespace

std::string publish(const std::string& ckpt_dir, const std::string& tmp, std::uint64_t step) {
  const fs::path ckpt(ckpt_dir);
  const fs::path final_dir = ckpt / checkpoint_dir_name(step);
  fsync_path((fs::path(tmp) / kCheckpointFile).string());
  fsync_path(tmp);
  std::error_code ec;
  if (fs::exists(fs::symlink_status(final_dir, ec))) {
    // Saving a step that already exists (a restart re-saving it): swap so
    // that step_<N> is complete at every instant, then drop the old one.
    if (exchange_paths(tmp, final_dir.string())) {
      fsync_path(ckpt.string());
      fs::remove_all(tmp);
    } else {
      remove_dir_safely(final_dir, "old");
      rename_or_throw(tmp, final_dir.string());
    }
  } else {
    rename_or_throw(tmp, final_dir.string());
  }
  fsync_path(ckpt.string());

  // latest: a relative symlink, replaced atomically by rename(2).
  const fs::path link = ckpt / kLatestLink;
  const fs::path link_tmp = ckpt / fmt::format(".{}.tmp-{}", kLatestLink, static_cast<long>(::getpid()));
  fs::remove(link_tmp, ec);
  if (::symlink(checkpoint_dir_name(step).c_str(), link_tmp.c_str()) != 0) {
    throw Error(fmt::format("cannot create the symlink {}: {}", link_tmp.string(), std::strerror(errno)));
  }
  const auto st = fs::symlink_status(link, ec);
  if (fs::exists(st) && !fs::is_symlink(st)) {
    fs::remove(link_tmp, ec);
    throw Error(
        fmt::format("{} exists and is not a symlink (ExaMoE keeps `latest` as a symlink to the newest "
                    "step_<N> directory): remove or rename it",
                    link.string()));
  }
  rename_or_throw(link_tmp.string(), link.string());
  fsync_path(ckpt.string());
  return final_dir.string();
}

std::vector<std::string> apply_retention(const std::string& ckpt_dir, int keep, const std::string& protect) {
  std::vector<std::string> deleted;
  if (keep <= 0) return deleted;
  auto all = list_checkpoints(ckpt_dir);  // oldest first
  std::error_code ec;
  const fs::path prot = fs::weakly_canonical(protect, ec);
  std::size_t remaining = all.size();
  for (const auto& [step, path] : all) {
    if (remaining <= static_cast<std::size_t>(keep)) break;
    if (fs::weakly_canonical(path, ec) == prot) continue;
    remove_dir_safely(path, "del");
    deleted.push_back(path);
    --remaining;
  }
  return deleted;
}

std::vector<std::string> remove_stale_work(const std::string& ckpt_dir) {
  std::vector<std::string> removed;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ckpt_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (is_work_name(name) && e.is_directory(ec)) {
      fs::remove_all(e.path(), ec);
      if (!ec) removed.push_back(e.path().string());
    }
  }
  return removed;
}

std::string describe_contents(const std::string& dir) {
  std::vector<std::string> items;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::string what = name;
    if (is_work_name(name) && name.find(".tmp-") != std::string::npos) {
      what += " (incomplete: a save that did not finish)";
    } else if (is_work_name(name)) {
      what += " (left over from a replace or delete that did not finish)";
    } else if (parse_step_name(name) && e.is_directory(ec)) {
      what += fmt::format(" (no {}: not a complete checkpoint)", kCheckpointFile);
    } else if (e.is_symlink(ec)) {
      std::error_code ec2;
      const auto target = fs::read_symlink(e.path(), ec2);
      what += fmt::format(" (symlink to {}{})", target.string(), fs::exists(e.path(), ec2) ? "" : ", missing");
    } else if (e.is_directory(ec)) {
      what += "/";
    }
    items.push_back(std::move(what));
  }
  if (ec) return fmt::format("(cannot list it: {})", ec.message());
  if (items.empty()) return "nothing (it is empty)";
  std::sort(items.begin(), items.end());
  return fmt::format("{}", fmt::join(items, ", "));
}

std::string older_checkpoints_hint(const std::string& step_dir) {
  const fs::path dir = fs::path(step_dir).lexically_normal();
  const fs::path parent = (dir.has_filename() ? dir : dir.parent_path()).parent_path();
  std::vector<std::string> others;
  std::error_code ec;
  const auto self = fs::weakly_canonical(dir, ec);
  for (const auto& [step, path] : list_checkpoints(parent.string())) {
    if (fs::weakly_canonical(path, ec) != self) others.push_back(path);
  }
  if (others.empty()) return "no other checkpoint of this run is available: restart the run from scratch";
  std::reverse(others.begin(), others.end());  // newest first
  return fmt::format("restart from an older checkpoint of the same run instead ({})", fmt::join(others, ", "));
}

void require_room(const std::string& dir, std::uint64_t bytes) {
  const std::string probe = (fs::path(dir) / ".room-probe").string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) throw Error(fmt::format("cannot create a file in {}: {}", dir, std::strerror(errno)));
  const int rc = ::fallocate(fd, 0, 0, static_cast<off_t>(bytes));
  const int err = rc == 0 ? 0 : errno;
  ::close(fd);
  ::unlink(probe.c_str());
  // File systems without fallocate are not probed: the write itself tells.
  if (rc != 0 && err != EOPNOTSUPP && err != ENOSYS && err != EINVAL)
    throw Error(fmt::format("{} has no room for the checkpoint's {:.1f} MiB ({})", dir, double(bytes) / 1048576.0,
                            std::strerror(err)));
}

std::string save_failure_hint(const std::string& ckpt_dir) {
  std::error_code ec;
  const auto sp = fs::space(ckpt_dir, ec);
  const std::string free_there =
      ec ? std::string() : fmt::format(" ({:.1f} MiB free there now)", double(sp.available) / 1048576.0);
  return fmt::format(
      "If the file system of {} is full{} or a quota or a file-size limit (ulimit -f) applies, free space there "
      "or set checkpoint.dir to a file system with room, then resume with checkpoint.resume = true",
      ckpt_dir, free_there);
}

}  // namespace fs_detail

std::vector<std::pair<std::uint64_t, std::string>> list_checkpoints(const std::string& ckpt_dir) {
  std::vector<std::pair<std::uint64_t, std::string>> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(ckpt_dir, ec)) {
    const auto step = fs_detail::parse_step_name(e.path().filename().string());
    if (!step || !e.is_directory(ec)) continue;
    if (!fs::is_regular_file(e.path() / kCheckpointFile, ec)) continue;
    out.emplace_back(*step, e.path().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string resolve_checkpoint(const std::string& path_in) {
  EXA_REQUIRE(!path_in.empty(),
              "no checkpoint given: pass a run directory, its ckpt/ directory or a step_<N> "
              "checkpoint directory");
  const fs::path path = fs::path(path_in).lexically_normal();
  std::error_code ec;
  const auto st = fs::status(path, ec);
  EXA_REQUIRE(fs::exists(st), "checkpoint {} does not exist", path.string());
  const std::string name = path.filename().string();
  if (fs::is_regular_file(st)) return path.parent_path().empty() ? "." : path.parent_path().string();
  EXA_REQUIRE(fs::is_directory(st), "checkpoint {} is neither a directory nor a file", path.string());

  if (fs_detail::is_work_name(name)) {
    throw Error(
        fmt::format("{} is not a complete checkpoint (a save that did not finish, or a replaced or deleted "
                    "one): use {} or one of the step_<N> directories next to it",
                    path.string(), (path.parent_path() / kLatestLink).string()));
  }
  if (fs::is_regular_file(path / kCheckpointFile, ec)) return path.string();

  const fs::path link = path / kLatestLink;
  if (fs::is_symlink(fs::symlink_status(link, ec))) {
    if (fs::is_regular_file(link / kCheckpointFile, ec)) {
      const fs::path target = fs::read_symlink(link, ec);
      return (target.is_absolute() ? target : (path / target)).lexically_normal().string();
    }
    log::warn("{} points at {}, which is not a complete checkpoint; using the newest complete one instead",
              link.string(), fs::read_symlink(link, ec).string());
  }
  const auto all = list_checkpoints(path.string());
  if (!all.empty()) return all.back().second;
  if (fs::is_directory(path / "ckpt", ec)) return resolve_checkpoint((path / "ckpt").string());

  throw Error(
      fmt::format("{} holds no complete checkpoint (a complete one is a step_<N> directory with a {}); it "
                  "holds: {}. Pass a run directory, its ckpt/ directory or a step_<N> directory",
                  path.string(), kCheckpointFile, fs_detail::describe_contents(path.string())));
}

}  // namespace exa::io
