// GGUF model files: header, metadata (every value type, arrays included), tensor infos.
// The file is memory-mapped; metadata strings and tensor data are views into the mapping.
//
// Invariants established by a successful parse (everything else is an Error, never a crash):
//  1. Every metadata string and array, and every tensor's data, lies inside the file.
//  2. Every tensor's offset is a multiple of the file's alignment (general.alignment, default
//     32, a power of two), its type is a known ggml type, its first dimension is a multiple of
//     the type's block size, and its byte size does not overflow.
//  3. Metadata keys and tensor names are unique.
//
// Thread-safety: a GgufFile is immutable after parse; share it freely between threads.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <variant>
#include <vector>

#include "base/status.h"
#include "kernels/tensor_type.h"

namespace chorus {

// Metadata value types, numbered as in the GGUF specification.
enum class GgufValueType : uint32_t {
  u8 = 0,
  i8 = 1,
  u16 = 2,
  i16 = 3,
  u32 = 4,
  i32 = 5,
  f32 = 6,
  boolean = 7,
  string = 8,
  array = 9,
  u64 = 10,
  i64 = 11,
  f64 = 12,
};

std::string_view gguf_value_type_name(GgufValueType t);

struct GgufArray {
  GgufValueType elem_type = GgufValueType::u8;
  uint64_t count = 0;
  const uint8_t* data = nullptr;          // packed little-endian elements (numeric types)
  std::vector<std::string_view> strings;  // elements, when elem_type == string

  // Element i converted to the widest type of its kind. REQUIRES: i < count, numeric type.
  int64_t int_at(uint64_t i) const;
  uint64_t uint_at(uint64_t i) const;
  double float_at(uint64_t i) const;
};

struct GgufValue {
  GgufValueType type = GgufValueType::u8;
  // Integers are stored widened (unsigned -> uint64_t, signed -> int64_t), floats as double.
  std::variant<uint64_t, int64_t, double, bool, std::string_view, GgufArray> v;

  std::string to_string(size_t max_array_items = 8) const;  // for `chorus info`
};

struct GgufKv {
  std::string_view key;
  GgufValue value;
};

struct GgufTensor {
  std::string_view name;
  TensorType type = TensorType::f32;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ne[0] is the contiguous (innermost) dimension
  uint64_t n_elements = 0;
  uint64_t offset = 0;            // from the start of the data section
  const uint8_t* data = nullptr;  // [n_bytes]
  size_t n_bytes = 0;

  std::string shape_string() const;  // e.g. "[576, 49152]"
};

class MappedFile;

class GgufFile {
 public:
  // Maps and parses a file. Errors name the file and the byte offset of the problem.
  static Result<GgufFile> open(const std::string& path);

  // Parses bytes already in memory. `name` is used in error messages. The caller keeps
  // `bytes` alive for the lifetime of the result unless `owner` does.
  static Result<GgufFile> parse(std::span<const uint8_t> bytes, std::string name,
                                std::shared_ptr<const void> owner = nullptr);

  const std::string& name() const { return name_; }
  uint32_t version() const { return version_; }
  uint64_t file_size() const { return size_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }

  const std::vector<GgufKv>& metadata() const { return kvs_; }
  const GgufValue* find(std::string_view key) const;

  // Typed lookups. Errors: Errc::not_found (missing key), Errc::bad_format (wrong type,
  // naming the key, the found type and the expected one), Errc::out_of_range.
  Result<std::string_view> get_string(std::string_view key) const;
  Result<uint64_t> get_uint(std::string_view key) const;  // any integer type, value >= 0
  Result<int64_t> get_int(std::string_view key) const;    // any integer type
  Result<double> get_float(std::string_view key) const;   // f32 or f64
  Result<bool> get_bool(std::string_view key) const;
  // An array whose elements have type `elem` (exactly).
  Result<const GgufArray*> get_array(std::string_view key, GgufValueType elem) const;

  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* find_tensor(std::string_view name) const;

 private:
  GgufFile() = default;
  friend class GgufParser;

  std::string name_;
  std::shared_ptr<const void> owner_;  // keeps the bytes alive (e.g. the MappedFile)
  uint32_t version_ = 0;
  uint64_t size_ = 0;
  uint64_t alignment_ = 32;
  uint64_t data_offset_ = 0;
  std::vector<GgufKv> kvs_;
  std::vector<GgufTensor> tensors_;
  std::unordered_map<std::string_view, size_t> kv_index_;
  std::unordered_map<std::string_view, size_t> tensor_index_;
};

}  // namespace chorus
