#include "formats/ggml_types.h"

#include <cstring>

namespace lowbit {
namespace {
constexpr GgmlTypeInfo kTypes[] = {
    {0, "F32", 1, 4},       {1, "F16", 1, 2},       {2, "Q4_0", 32, 18},    {3, "Q4_1", 32, 20},
    {6, "Q5_0", 32, 22},    {7, "Q5_1", 32, 24},    {8, "Q8_0", 32, 34},    {10, "Q2_K", 256, 84},
    {11, "Q3_K", 256, 110}, {12, "Q4_K", 256, 144}, {13, "Q5_K", 256, 176}, {14, "Q6_K", 256, 210},
    {20, "IQ4_NL", 32, 18}, {24, "I8", 1, 1},       {25, "I16", 1, 2},      {26, "I32", 1, 4},
    {27, "I64", 1, 8},      {28, "F64", 1, 8},      {30, "BF16", 1, 2},     {39, "MXFP4", 32, 17},
};
}  // namespace

const GgmlTypeInfo* ggml_type_info(int id) {
  for (auto& t : kTypes)
    if (t.id == id) return &t;
  return nullptr;
}

const GgmlTypeInfo* ggml_type_by_name(const char* name) {
  for (auto& t : kTypes)
    if (std::strcmp(t.name, name) == 0) return &t;
  return nullptr;
}

}  // namespace lowbit
