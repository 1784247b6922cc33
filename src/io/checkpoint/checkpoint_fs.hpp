#pragma once
// Private to examoe_checkpoint: the checkpoint directory (naming, atomic
// publication, `latest`, retention). Rank-local; the callers run these on
// rank 0 and broadcast the outcome.
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace exa::io::fs_detail {

// ".step_00000100.tmp-4242": a save in progress (or cut short by a crash).
std::string temp_dir_name(std::uint64_t step, long pid);
// Parses "step_<digits>" (at least 8 digits); nullopt for anything else.
std::optional<std::uint64_t> parse_step_name(const std::string& name);
// True for the names save_checkpoint uses for work in progress
// (".step_*.tmp-*", ".step_*.old-*", ".step_*.del-*").
bool is_work_name(const std::string& name);

// fsync a file or directory; directories on file systems that refuse it are
// skipped. exa::Error naming the path on a real failure.
void fsync_path(const std::string& path);

// Moves the finished temporary directory `tmp` to <ckpt>/step_<N> (replacing
// an existing step_<N> atomically where the file system allows), then points
// <ckpt>/latest at it. Returns the step directory.
std::string publish(const std::string& ckpt_dir, const std::string& tmp, std::uint64_t step);

// Deletes complete checkpoints beyond the `keep` newest (by step), never
// `protect`; keep <= 0 keeps all. Each is first renamed to a work name, so a
// crash mid-delete never leaves a half-deleted step_<N>. Returns what it deleted.
std::vector<std::string> apply_retention(const std::string& ckpt_dir, int keep, const std::string& protect);

// Deletes leftover work directories (saves or deletions a crash cut short).
std::vector<std::string> remove_stale_work(const std::string& ckpt_dir);

// "step_00000100, step_00000200 and .step_00000300.tmp-77 (incomplete: a save
// that did not finish)": what a directory holds, for error messages.
std::string describe_contents(const std::string& dir);

// A sentence naming the other complete checkpoints next to `step_dir` (for
// "restart from an older checkpoint" advice).
std::string older_checkpoints_hint(const std::string& step_dir);

// exa::Error naming `dir` and the cause (ENOSPC, EDQUOT, EFBIG: a full
// disk, a quota, a file-size limit) unless a file of `bytes` can be
// allocated there (fallocate; file systems without it pass). A save checks
// this before HDF5 writes anything: HDF5 1.10 cannot close a file whose
// writes failed and crashes at exit instead.
void require_room(const std::string& dir, std::uint64_t bytes);

// The advice of a failed save: what to check (free space, quota, file-size
// limit) and what to do about it.
std::string save_failure_hint(const std::string& ckpt_dir);

}  // namespace exa::io::fs_detail
