// `lowbit eval outliers` end to end on kjv-brown-6M: the --json shape with a QuaRot comparison, the chart
// file, and the usage errors (exit code 2 with the flag named).
#include <gtest/gtest.h>

#include <unistd.h>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tests/common/run_cli.h"

namespace {
const std::string kShared = LOWBIT_SHARED_DIR;
const std::string kModel = kShared + "/models/kjv-brown-6M/model.bin";
const std::string kText = kShared + "/data/kjv-brown/val.txt";

using lowbit::testing_cli::run_cli;

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() / ("lowbit_outl_" + std::to_string(::getpid()) + "_" + name))
      .string();
}

TEST(OutliersCli, JsonBeforeAndAfterQuarot) {
  const std::string chart = temp_path("o.svg");
  auto r = run_cli("eval outliers -m " + kModel + " --text " + kText +
                   " --tokens 128 --rotate quarot --top 2 --json --no-progress --chart " + chart);
  ASSERT_EQ(r.rc, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["tokens"], 128);
  EXPECT_EQ(j["after_label"], "quarot");
  EXPECT_EQ(j["rotation"]["method"], "quarot");
  const auto& b = j["before"];
  const auto& a = j["after"];
  ASSERT_EQ(b["sites"].size(), 24u);  // 6 layers x attn_in, o_in, mlp_in, down_in
  ASSERT_EQ(a["sites"].size(), 24u);
  EXPECT_EQ(b["sites"][3]["site"], "down_in");
  EXPECT_EQ(b["sites"][3]["cols"], 768);
  EXPECT_EQ(b["sites"][0]["top"].size(), 2u);
  EXPECT_TRUE(b["summary"]["worst"]["site"].is_string());
  // QuaRot's R4 spreads the down_proj input's outliers: every layer's down_in ratio falls.
  for (size_t i = 3; i < 24; i += 4)
    EXPECT_LT(a["sites"][i]["ratio"].get<double>(), b["sites"][i]["ratio"].get<double>()) << i;
  EXPECT_LT(a["summary"]["mean_ratio"].get<double>(), b["summary"]["mean_ratio"].get<double>());
  std::ifstream f(chart);
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("</svg>"), std::string::npos);
  std::filesystem::remove(chart);
}

TEST(OutliersCli, DuquantBuildsItsRotationFromTheText) {
  auto r = run_cli("eval outliers -m " + kModel + " --text " + kText +
                   " --tokens 128 --rotate duquant --duquant-block 64 --json --no-progress");
  ASSERT_EQ(r.rc, 0) << r.out;
  auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["after_label"], "duquant");
  ASSERT_EQ(j["after"]["sites"].size(), 24u);
  EXPECT_LT(j["after"]["summary"]["mean_ratio"].get<double>(),
            j["before"]["summary"]["mean_ratio"].get<double>());
  r = run_cli("eval outliers -m " + kModel + " --text " + kText +
                  " --rotate duquant --duquant-block 48 --no-progress",
              true);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("duquant_block=48 does not divide the hidden size 256"), std::string::npos) << r.out;
}

TEST(OutliersCli, UsageErrors) {
  auto r = run_cli("eval outliers -m " + kModel + " --no-progress", true);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--text"), std::string::npos) << r.out;
  r = run_cli("eval outliers -m " + kModel + " --text " + kText + " --rotate spin --no-progress", true);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--rotate 'spin'"), std::string::npos) << r.out;
  r = run_cli("eval outliers -m " + kModel + " --text " + kText + " --chart x.png --no-progress", true);
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("must end in .svg or .html"), std::string::npos) << r.out;
  r = run_cli("eval outliers -m " + kModel + " --text " + kText + " --bogus --no-progress", true);
  EXPECT_EQ(r.rc, 2) << r.out;
}
}  // namespace
