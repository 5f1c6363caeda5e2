// Test helper: writes GGUF files byte by byte, so tests can build valid files of any shape
// and then corrupt exactly one field.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace chorus::test {

class GgufBuilder {
 public:
  uint32_t version = 3;
  uint32_t alignment = 32;  // used for layout; add "general.alignment" yourself to change it

  void kv_raw(const std::string& key, uint32_t type, const std::vector<uint8_t>& value) {
    put_str(meta_, key);
    put(meta_, type);
    meta_.insert(meta_.end(), value.begin(), value.end());
    ++n_kv_;
  }
  void kv_u32(const std::string& key, uint32_t v) { kv_raw(key, 4, bytes(v)); }
  void kv_i32(const std::string& key, int32_t v) { kv_raw(key, 5, bytes(v)); }
  void kv_f32(const std::string& key, float v) { kv_raw(key, 6, bytes(v)); }
  void kv_bool(const std::string& key, bool v) { kv_raw(key, 7, {static_cast<uint8_t>(v)}); }
  void kv_u64(const std::string& key, uint64_t v) { kv_raw(key, 10, bytes(v)); }
  void kv_string(const std::string& key, const std::string& v) {
    std::vector<uint8_t> b;
    put_str(b, v);
    kv_raw(key, 8, b);
  }
  void kv_strings(const std::string& key, const std::vector<std::string>& v) {
    std::vector<uint8_t> b;
    put(b, uint32_t{8});
    put(b, static_cast<uint64_t>(v.size()));
    for (const auto& s : v) put_str(b, s);
    kv_raw(key, 9, b);
  }
  void kv_f32s(const std::string& key, const std::vector<float>& v) {
    std::vector<uint8_t> b;
    put(b, uint32_t{6});
    put(b, static_cast<uint64_t>(v.size()));
    for (float x : v) put(b, x);
    kv_raw(key, 9, b);
  }
  void kv_i32s(const std::string& key, const std::vector<int32_t>& v) {
    std::vector<uint8_t> b;
    put(b, uint32_t{5});
    put(b, static_cast<uint64_t>(v.size()));
    for (int32_t x : v) put(b, x);
    kv_raw(key, 9, b);
  }

  // A tensor with explicit type id and dims; `data` is placed at the next aligned offset
  // unless `offset_override` is given.
  void tensor(const std::string& name, uint32_t type, const std::vector<uint64_t>& dims,
              const std::vector<uint8_t>& data, int64_t offset_override = -1) {
    uint64_t offset = offset_override >= 0 ? static_cast<uint64_t>(offset_override) : align(data_.size());
    if (offset_override < 0) data_.resize(offset, 0);
    put_str(tinfo_, name);
    put(tinfo_, static_cast<uint32_t>(dims.size()));
    for (uint64_t d : dims) put(tinfo_, d);
    put(tinfo_, type);
    put(tinfo_, offset);
    if (offset_override < 0) data_.insert(data_.end(), data.begin(), data.end());
    ++n_tensors_;
  }

  std::vector<uint8_t> build() const {
    std::vector<uint8_t> out = {'G', 'G', 'U', 'F'};
    put(out, version);
    put(out, n_tensors_);
    put(out, n_kv_);
    out.insert(out.end(), meta_.begin(), meta_.end());
    out.insert(out.end(), tinfo_.begin(), tinfo_.end());
    out.resize(align(out.size()), 0);
    out.insert(out.end(), data_.begin(), data_.end());
    return out;
  }

  template <class T>
  static std::vector<uint8_t> bytes(T v) {
    std::vector<uint8_t> b(sizeof v);
    std::memcpy(b.data(), &v, sizeof v);
    return b;
  }
  template <class T>
  static void put(std::vector<uint8_t>& b, T v) {
    const auto x = bytes(v);
    b.insert(b.end(), x.begin(), x.end());
  }
  static void put_str(std::vector<uint8_t>& b, const std::string& s) {
    put(b, static_cast<uint64_t>(s.size()));
    b.insert(b.end(), s.begin(), s.end());
  }

 private:
  uint64_t align(uint64_t n) const { return (n + alignment - 1) / alignment * alignment; }

  uint64_t n_kv_ = 0, n_tensors_ = 0;
  std::vector<uint8_t> meta_, tinfo_, data_;
};

// Overwrites sizeof(T) bytes at `at`.
template <class T>
void patch(std::vector<uint8_t>& file, size_t at, T v) {
  std::memcpy(file.data() + at, &v, sizeof v);
}

}  // namespace chorus::test
