#include "formats/ggml_types.h"

#include <cstring>

namespace lowbit {
namespace {
constexpr GgmlTypeInfo kTypes[] = {
    {ggml::F32, "F32", 1, 4},         {ggml::F16, "F16", 1, 2},           {ggml::Q4_0, "Q4_0", 32, 18},
    {ggml::Q4_1, "Q4_1", 32, 20},     {ggml::Q5_0, "Q5_0", 32, 22},       {ggml::Q5_1, "Q5_1", 32, 24},
    {ggml::Q8_0, "Q8_0", 32, 34},     {ggml::Q2_K, "Q2_K", 256, 84},      {ggml::Q3_K, "Q3_K", 256, 110},
    {ggml::Q4_K, "Q4_K", 256, 144},   {ggml::Q5_K, "Q5_K", 256, 176},     {ggml::Q6_K, "Q6_K", 256, 210},
    {ggml::IQ4_NL, "IQ4_NL", 32, 18}, {ggml::IQ4_XS, "IQ4_XS", 256, 136}, {ggml::I8, "I8", 1, 1},
    {ggml::I16, "I16", 1, 2},         {ggml::I32, "I32", 1, 4},           {ggml::I64, "I64", 1, 8},
    {ggml::F64, "F64", 1, 8},         {ggml::BF16, "BF16", 1, 2},         {ggml::MXFP4, "MXFP4", 32, 17},
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
