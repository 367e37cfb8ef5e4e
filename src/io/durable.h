// Durable publication of whole directories (quantized checkpoints, fixtures, compare caches). A reader never
// sees a half-written output: everything is written into a private temporary directory next to the target,
// every file and the directory itself are fsynced, and only then is it renamed into place (with the parent
// fsynced after), so a crash or kill at any point leaves either the old target or the new one. Single files
// use write_file_atomic (io/mapped_file.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace lowbit::io {

// Creates a fresh, empty temporary directory `<target>.tmp-XXXXXX` next to target and records this process's
// id in it. Temporaries that an earlier writer of the same target left behind (its process no longer runs:
// killed, crashed, power loss) are removed first. The parent of target must exist: UsageError("io")
// otherwise.
std::string make_temp_dir_for(const std::string& target);

// Gives the temporary directory the modes a published output has (mkdtemp makes it 0700, and copies keep a
// read-only source's mode): rw-r--r-- for the named files, rwxr-xr-x for tmp. Returns the files' total size.
int64_t open_to_readers(const std::string& tmp, const std::vector<std::string>& files);

// Fsyncs every regular file under tmp, then tmp itself, then renames tmp onto target and fsyncs target's
// parent. When target exists: replace = false gives Error("io"); replace = true swaps the two directories in
// one atomic rename (renameat2 RENAME_EXCHANGE; on file systems without it, two renames) and removes the old
// one.
void publish_dir(const std::string& tmp, const std::string& target, bool replace);

// The fallback of publish_dir(replace = true) where RENAME_EXCHANGE is not supported: the old target is
// renamed to a fresh name next to it, tmp onto target, then the old one removed; if the second rename fails
// the old target is put back and Error("io") thrown. Exposed for its test.
void replace_dir_by_renames(const std::string& tmp, const std::string& target);

// fsync of one file or directory by path; Error("io") when a file cannot be synced (directories: best effort,
// some file systems refuse it).
void fsync_path(const std::string& path);

}  // namespace lowbit::io
