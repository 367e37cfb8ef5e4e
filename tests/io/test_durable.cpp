// Durable directory publication (io/durable.h): the atomic swap and its two-rename fallback both replace the
// target with the new directory and leave no temporary behind; a missing parent is a usage error.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "io/durable.h"

namespace {
namespace fs = std::filesystem;

fs::path scratch(const std::string& name) {
  const fs::path d =
      fs::temp_directory_path() / ("lowbit_durable_" + std::to_string(::getpid()) + "_" + name);
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

std::string read(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A published directory holding one file with `text`; like the real writers, the temporary is removed when
// publishing fails.
void publish(const fs::path& target, const std::string& text, bool replace) {
  const std::string tmp = lowbit::io::make_temp_dir_for(target.string());
  std::ofstream(fs::path(tmp) / "f.txt") << text;
  try {
    lowbit::io::publish_dir(tmp, target.string(), replace);
  } catch (...) {
    fs::remove_all(tmp);
    throw;
  }
}

void expect_only_target(const fs::path& d) {
  for (const auto& e : fs::directory_iterator(d)) EXPECT_EQ(e.path().filename(), "out") << e.path();
  for (const auto& e : fs::directory_iterator(d / "out")) EXPECT_EQ(e.path().filename(), "f.txt") << e.path();
}

TEST(Durable, PublishReplaceSwapsAndLeavesNothingBehind) {
  const fs::path d = scratch("swap");
  publish(d / "out", "old", false);
  EXPECT_THROW(publish(d / "out", "again", false), lowbit::Error);
  EXPECT_EQ(read(d / "out" / "f.txt"), "old");
  publish(d / "out", "new", true);
  EXPECT_EQ(read(d / "out" / "f.txt"), "new");
  expect_only_target(d);
  fs::remove_all(d);
}

// The path taken on file systems without RENAME_EXCHANGE.
TEST(Durable, TwoRenameFallbackReplacesAndLeavesNothingBehind) {
  const fs::path d = scratch("fallback");
  publish(d / "out", "old", false);
  const std::string tmp = lowbit::io::make_temp_dir_for((d / "out").string());
  std::ofstream(fs::path(tmp) / "f.txt") << "new";
  lowbit::io::replace_dir_by_renames(tmp, (d / "out").string());
  EXPECT_EQ(read(d / "out" / "f.txt"), "new");
  expect_only_target(d);
  fs::remove_all(d);
}

TEST(Durable, MissingParentIsAUsageError) {
  const fs::path d = scratch("parent");
  EXPECT_THROW(lowbit::io::make_temp_dir_for((d / "no" / "out").string()), lowbit::UsageError);
  EXPECT_FALSE(fs::exists(d / "no"));
  fs::remove_all(d);
}

}  // namespace
