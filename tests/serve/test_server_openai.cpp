// The official `openai` npm client (tests/serve/openai_client.mjs, pinned in tests/serve/package-lock.json)
// against `lowbit serve` on stories260K. scripts/setup.sh installs it (`npm ci --prefix tests/serve`);
// without node or the package the test is skipped and says how to install them.
#include <gtest/gtest.h>

#include <filesystem>

#include "tests/serve/test_server_process.h"

namespace {

using lowbit::testing_serve::ServerProcess;
using lowbit::testing_serve::stories_model;

std::string shell_output(const std::string& cmd, int* rc) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  const int st = pclose(p);
  *rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return out;
}

TEST(ServerOpenAiClient, OfficialNpmClientPassesItsChecks) {
  const std::string dir = std::string(LOWBIT_SOURCE_DIR) + "/tests/serve";
  int rc = 0;
  shell_output("node --version >/dev/null 2>&1", &rc);
  if (rc != 0) GTEST_SKIP() << "node is not installed (scripts/setup.sh installs it)";
  if (!std::filesystem::exists(dir + "/node_modules/openai/package.json"))
    GTEST_SKIP()
        << "the openai npm package is not installed: run npm ci --prefix tests/serve (scripts/setup.sh)";
  for (const bool with_key : {false, true}) {
    std::vector<std::string> args = {"-m", stories_model()};
    if (with_key) args.insert(args.end(), {"--api-key", "test-key"});
    ServerProcess s(args);
    const std::string out = shell_output("timeout -k 5 120 node " + dir + "/openai_client.mjs " + s.url() +
                                             "/v1" + (with_key ? " test-key" : "") + " 2>&1",
                                         &rc);
    EXPECT_EQ(rc, 0) << out << "\nserver log:\n" << s.log();
    EXPECT_NE(out.find("checks passed"), std::string::npos) << out;
  }
}

}  // namespace
