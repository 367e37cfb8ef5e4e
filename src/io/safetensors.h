// safetensors reader and writer.
// Layout: u64 little-endian header length N (<= 100 MB), N bytes of JSON header
// {name: {dtype, shape, data_offsets: [b, e]}, "__metadata__": {str: str}}, then the data section. Every
// offset, shape and size is checked against the file (hostile input): a lying header gives Error("io") naming
// the tensor and the file. Overlapping tensors and duplicate names are rejected. Views may be unaligned when
// a foreign writer did not pad its header: read them with memcpy.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/mapped_file.h"
#include "tensor/tensor.h"

namespace lowbit::io {

struct SafetensorsFile {
  std::string path;
  std::shared_ptr<MappedFile> file;             // keeps views alive
  std::map<std::string, TensorView> tensors;    // name -> view into file
  std::map<std::string, std::string> metadata;  // "__metadata__"

  static SafetensorsFile open(const std::string& path);
  // Parse from memory (used by fuzzing); views point into `bytes`, which must outlive the result.
  static SafetensorsFile parse(const uint8_t* bytes, size_t n, const std::string& name_for_errors);
};

struct TensorToWrite {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  const void* data;  // dtype_size(dtype) * numel bytes
  size_t nbytes;
};

// Writes a safetensors file atomically (tensors sorted by name, 8-byte aligned header padding with spaces).
void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace lowbit::io
