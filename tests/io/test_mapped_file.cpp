#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>

#include "io/mapped_file.h"
#include "io_test_util.h"

namespace lowbit::io {
namespace {

using namespace lowbit::io::testing;

size_t count_entries(const fs::path& dir) {
  size_t n = 0;
  for ([[maybe_unused]] auto& e : fs::directory_iterator(dir)) ++n;
  return n;
}

TEST(MappedFile, MapsContents) {
  ScratchDir d;
  write_text(d.file("a.bin"), "hello");
  auto m = MappedFile::open(d.file("a.bin"));
  ASSERT_EQ(m->size(), 5u);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(m->data()), 5), "hello");
  EXPECT_EQ(m->path(), d.file("a.bin"));
}

TEST(MappedFile, EmptyFileIsValid) {
  ScratchDir d;
  write_text(d.file("empty"), "");
  auto m = MappedFile::open(d.file("empty"));
  EXPECT_EQ(m->size(), 0u);
  EXPECT_NE(m->data(), nullptr);
}

TEST(MappedFile, MissingFileAndDirectoryAreErrors) {
  ScratchDir d;
  expect_io_error([&] { MappedFile::open(d.file("nope")); }, "cannot open");
  expect_io_error([&] { MappedFile::open(d.path().string()); }, "directory");
}

TEST(WriteFileAtomic, WritesAndReplaces) {
  ScratchDir d;
  const std::string p = d.file("out.bin");
  write_file_atomic(p, "abc", 3);
  EXPECT_EQ(read_bytes(p), (std::vector<uint8_t>{'a', 'b', 'c'}));
  std::string x = "xy", z = "z";
  write_file_atomic(p, std::vector<ByteSpan>{{x.data(), 2}, {z.data(), 1}, {nullptr, 0}});
  EXPECT_EQ(read_bytes(p), (std::vector<uint8_t>{'x', 'y', 'z'}));
  write_file_atomic(p, nullptr, 0);
  EXPECT_TRUE(read_bytes(p).empty());
  EXPECT_EQ(count_entries(d.path()), 1u);  // no temporaries left behind
}

TEST(WriteFileAtomic, MissingDirectoryIsAnError) {
  ScratchDir d;
  expect_io_error([&] { write_file_atomic(d.file("no/such/dir/f.bin"), "a", 1); }, "temporary");
}

TEST(WriteFileAtomic, TargetIsDirectoryLeavesNoTemporary) {
  ScratchDir d;
  fs::create_directories(d.path() / "sub" / "inner");
  expect_io_error([&] { write_file_atomic(d.file("sub"), "a", 1); }, "rename");
  EXPECT_EQ(count_entries(d.path()), 1u);
}

// A write that fails midway (here: the file size limit, standing in for a full disk) removes the temporary
// and leaves the previous file untouched.
TEST(WriteFileAtomic, FailedWriteKeepsOriginal) {
  ScratchDir d;
  const std::string p = d.file("keep.bin");
  write_file_atomic(p, "original", 8);
  struct rlimit old {};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &old), 0);
  auto prev = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit lim = old;
  lim.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &lim), 0);
  std::vector<uint8_t> big(1 << 20, 7);
  bool threw = false;
  try {
    write_file_atomic(p, big.data(), big.size());
  } catch (const Error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find("unchanged"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &old);
  std::signal(SIGXFSZ, prev);
  EXPECT_TRUE(threw);
  EXPECT_EQ(read_bytes(p), (std::vector<uint8_t>{'o', 'r', 'i', 'g', 'i', 'n', 'a', 'l'}));
  EXPECT_EQ(count_entries(d.path()), 1u);
}

}  // namespace
}  // namespace lowbit::io
