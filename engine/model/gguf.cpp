#include "engine/model/gguf.h"

#include <cstring>
#include <limits>

#include "engine/model/mapped_file.h"

namespace chorus {

namespace {

constexpr uint64_t kDefaultAlignment = 32;
constexpr uint64_t kMaxKeyLength = 65535;  // the specification's limit on key length
constexpr uint32_t kMaxDims = 4;

size_t scalar_size(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8:
    case GgufValueType::i8:
    case GgufValueType::boolean: return 1;
    case GgufValueType::u16:
    case GgufValueType::i16: return 2;
    case GgufValueType::u32:
    case GgufValueType::i32:
    case GgufValueType::f32: return 4;
    case GgufValueType::u64:
    case GgufValueType::i64:
    case GgufValueType::f64: return 8;
    default: return 0;  // string, array
  }
}

bool valid_value_type(uint32_t t) {
  return t <= static_cast<uint32_t>(GgufValueType::f64);
}

template <class T>
T load(const uint8_t* p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// Reads a scalar of type t at p into the widened variant.
GgufValue read_scalar(GgufValueType t, const uint8_t* p) {
  GgufValue out;
  out.type = t;
  switch (t) {
    case GgufValueType::u8: out.v = uint64_t{load<uint8_t>(p)}; break;
    case GgufValueType::i8: out.v = int64_t{load<int8_t>(p)}; break;
    case GgufValueType::u16: out.v = uint64_t{load<uint16_t>(p)}; break;
    case GgufValueType::i16: out.v = int64_t{load<int16_t>(p)}; break;
    case GgufValueType::u32: out.v = uint64_t{load<uint32_t>(p)}; break;
    case GgufValueType::i32: out.v = int64_t{load<int32_t>(p)}; break;
    case GgufValueType::f32: out.v = double{load<float>(p)}; break;
    case GgufValueType::boolean: out.v = load<uint8_t>(p) != 0; break;
    case GgufValueType::u64: out.v = load<uint64_t>(p); break;
    case GgufValueType::i64: out.v = load<int64_t>(p); break;
    case GgufValueType::f64: out.v = load<double>(p); break;
    default: break;
  }
  return out;
}

}  // namespace

// Walks the bytes once, front to back. Every read is bounds-checked against the file size
// and every count against the bytes that remain, so absurd counts fail before allocating.
class GgufParser {
 public:
  GgufParser(std::span<const uint8_t> bytes, const std::string& name)
      : p_(bytes.data()), size_(bytes.size()), name_(name) {}

  Result<GgufFile> run(GgufFile file);

 private:
  Error fail(Errc code, const std::string& what) const {
    return make_error(code, name_ + ": offset " + std::to_string(pos_) + ": " + context_ +
                                (context_.empty() ? "" : ": ") + what);
  }
  uint64_t remaining() const { return size_ - pos_; }

  bool need(uint64_t n, const char* what, Error* err) const {
    if (n <= remaining()) return true;
    *err = fail(Errc::bad_format, std::string("truncated file: ") + what + " needs " + std::to_string(n) +
                                      " bytes but only " + std::to_string(remaining()) + " remain");
    return false;
  }

  template <class T>
  bool read(T* out, const char* what, Error* err) {
    if (!need(sizeof(T), what, err)) return false;
    *out = load<T>(p_ + pos_);
    pos_ += sizeof(T);
    return true;
  }

  bool read_string(std::string_view* out, const char* what, Error* err) {
    uint64_t len = 0;
    if (!read(&len, what, err)) return false;
    if (len > remaining()) {
      *err = fail(Errc::bad_format, std::string(what) + " length " + std::to_string(len) + " exceeds the " +
                                        std::to_string(remaining()) + " bytes left in the file");
      return false;
    }
    *out = std::string_view(reinterpret_cast<const char*>(p_ + pos_), len);
    pos_ += len;
    return true;
  }

  bool read_value(GgufValueType type, GgufValue* out, Error* err);
  bool read_kv(GgufFile& file, uint64_t index, Error* err);
  bool read_tensor_info(GgufFile& file, uint64_t index, Error* err);

  const uint8_t* p_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& name_;
  std::string context_;  // "metadata #3 'general.name'", prefixed to error messages
};

bool GgufParser::read_value(GgufValueType type, GgufValue* out, Error* err) {
  if (type == GgufValueType::string) {
    std::string_view s;
    if (!read_string(&s, "string value", err)) return false;
    out->type = type;
    out->v = s;
    return true;
  }
  if (type != GgufValueType::array) {
    const size_t n = scalar_size(type);
    if (!need(n, "value", err)) return false;
    *out = read_scalar(type, p_ + pos_);
    pos_ += n;
    return true;
  }
  uint32_t elem_raw = 0;
  uint64_t count = 0;
  if (!read(&elem_raw, "array element type", err)) return false;
  if (!valid_value_type(elem_raw)) {
    *err = fail(Errc::bad_format, "unknown array element type " + std::to_string(elem_raw));
    return false;
  }
  const auto elem = static_cast<GgufValueType>(elem_raw);
  if (elem == GgufValueType::array) {
    *err = fail(Errc::unsupported, "arrays of arrays are not supported");
    return false;
  }
  if (!read(&count, "array length", err)) return false;
  GgufArray arr;
  arr.elem_type = elem;
  arr.count = count;
  arr.data = p_ + pos_;
  if (elem == GgufValueType::string) {
    // Each string needs at least its 8-byte length: reject absurd counts before reserving.
    if (count > remaining() / 8) {
      *err = fail(Errc::bad_format, "string array length " + std::to_string(count) + " cannot fit in the " +
                                        std::to_string(remaining()) + " bytes left in the file");
      return false;
    }
    arr.strings.reserve(count);
    for (uint64_t i = 0; i < count; ++i) {
      std::string_view s;
      if (!read_string(&s, "array string", err)) return false;
      arr.strings.push_back(s);
    }
  } else {
    const size_t n = scalar_size(elem);
    if (count > remaining() / n) {
      *err = fail(Errc::bad_format, "array of " + std::to_string(count) + " " +
                                        std::string(gguf_value_type_name(elem)) + " cannot fit in the " +
                                        std::to_string(remaining()) + " bytes left in the file");
      return false;
    }
    pos_ += count * n;
  }
  out->type = GgufValueType::array;
  out->v = std::move(arr);
  return true;
}

bool GgufParser::read_kv(GgufFile& file, uint64_t index, Error* err) {
  context_ = "metadata #" + std::to_string(index);
  std::string_view key;
  if (!read_string(&key, "key", err)) return false;
  if (key.size() > kMaxKeyLength) {
    *err = fail(Errc::bad_format,
                "key length " + std::to_string(key.size()) + " exceeds " + std::to_string(kMaxKeyLength));
    return false;
  }
  context_ += " '" + std::string(key) + "'";
  uint32_t type_raw = 0;
  if (!read(&type_raw, "value type", err)) return false;
  if (!valid_value_type(type_raw)) {
    *err = fail(Errc::bad_format, "unknown value type " + std::to_string(type_raw));
    return false;
  }
  GgufKv kv;
  kv.key = key;
  if (!read_value(static_cast<GgufValueType>(type_raw), &kv.value, err)) return false;
  if (!file.kv_index_.emplace(key, file.kvs_.size()).second) {
    *err = fail(Errc::bad_format, "duplicate metadata key");
    return false;
  }
  file.kvs_.push_back(std::move(kv));
  return true;
}

bool GgufParser::read_tensor_info(GgufFile& file, uint64_t index, Error* err) {
  context_ = "tensor info #" + std::to_string(index);
  GgufTensor t;
  if (!read_string(&t.name, "tensor name", err)) return false;
  context_ += " '" + std::string(t.name) + "'";
  uint32_t n_dims = 0;
  if (!read(&n_dims, "dimension count", err)) return false;
  if (n_dims > kMaxDims) {
    *err = fail(Errc::bad_format, std::to_string(n_dims) + " dimensions (at most 4)");
    return false;
  }
  t.n_dims = static_cast<int>(n_dims);
  uint64_t n_elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    uint64_t ne = 0;
    if (!read(&ne, "dimension", err)) return false;
    if (ne > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (ne != 0 && n_elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) / ne)) {
      *err = fail(Errc::bad_format, "dimension " + std::to_string(d) + " = " + std::to_string(ne) +
                                        " overflows the element count");
      return false;
    }
    t.ne[d] = static_cast<int64_t>(ne);
    n_elements *= ne;
  }
  t.n_elements = n_elements;
  uint32_t type_raw = 0;
  if (!read(&type_raw, "tensor type", err)) return false;
  const auto info = tensor_type_info(type_raw);
  if (!info) {
    *err = fail(Errc::unsupported, "unknown tensor type id " + std::to_string(type_raw));
    return false;
  }
  t.type = info->type;
  if (t.ne[0] % info->block_elems != 0) {
    *err = fail(Errc::bad_format, "first dimension " + std::to_string(t.ne[0]) +
                                      " is not a multiple of the " + std::string(info->name) +
                                      " block size " + std::to_string(info->block_elems));
    return false;
  }
  const uint64_t n_blocks = n_elements / info->block_elems;
  if (n_blocks > std::numeric_limits<uint64_t>::max() / info->block_bytes) {
    *err = fail(Errc::bad_format, "byte size overflows");
    return false;
  }
  t.n_bytes = n_blocks * info->block_bytes;
  if (!read(&t.offset, "tensor offset", err)) return false;
  if (!file.tensor_index_.emplace(t.name, file.tensors_.size()).second) {
    *err = fail(Errc::bad_format, "duplicate tensor name");
    return false;
  }
  file.tensors_.push_back(t);
  return true;
}

Result<GgufFile> GgufParser::run(GgufFile file) {
  Error err;
  char magic[4] = {};
  if (size_ < 4)
    return fail(Errc::bad_format, "file too small to be GGUF (" + std::to_string(size_) + " bytes)");
  std::memcpy(magic, p_, 4);
  if (std::memcmp(magic, "GGUF", 4) != 0) {
    std::string shown;
    for (char c : magic) shown += (c >= 32 && c < 127) ? c : '?';
    return fail(Errc::bad_format, "bad magic '" + shown + "': not a GGUF file");
  }
  pos_ = 4;
  uint32_t version = 0;
  if (!read(&version, "version", &err)) return err;
  if (version == 0x02000000u || version == 0x03000000u)
    return fail(Errc::unsupported, "big-endian GGUF files are not supported");
  if (version < 2 || version > 3)
    return fail(Errc::unsupported, "GGUF version " + std::to_string(version) +
                                       " is not supported (chorus reads versions 2 and 3)");
  file.version_ = version;
  uint64_t n_tensors = 0, n_kv = 0;
  if (!read(&n_tensors, "tensor count", &err)) return err;
  if (!read(&n_kv, "metadata count", &err)) return err;
  // A key/value takes at least 13 bytes and a tensor info at least 24.
  if (n_kv > remaining() / 13)
    return fail(Errc::bad_format, "metadata count " + std::to_string(n_kv) + " cannot fit in a file of " +
                                      std::to_string(size_) + " bytes");
  if (n_tensors > remaining() / 24)
    return fail(Errc::bad_format, "tensor count " + std::to_string(n_tensors) + " cannot fit in a file of " +
                                      std::to_string(size_) + " bytes");
  file.kvs_.reserve(n_kv);
  for (uint64_t i = 0; i < n_kv; ++i)
    if (!read_kv(file, i, &err)) return err;
  context_.clear();

  if (const GgufValue* a = file.find("general.alignment")) {
    context_ = "metadata 'general.alignment'";
    if (a->type != GgufValueType::u32)
      return fail(Errc::bad_format,
                  "has type " + std::string(gguf_value_type_name(a->type)) + ", expected uint32");
    const uint64_t align = std::get<uint64_t>(a->v);
    if (align == 0 || (align & (align - 1)) != 0)
      return fail(Errc::bad_format, "alignment " + std::to_string(align) + " is not a power of two");
    file.alignment_ = align;
    context_.clear();
  }

  file.tensors_.reserve(n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i)
    if (!read_tensor_info(file, i, &err)) return err;
  context_.clear();

  const uint64_t data_offset = (pos_ + file.alignment_ - 1) / file.alignment_ * file.alignment_;
  if (n_tensors > 0 && data_offset > size_)
    return fail(Errc::bad_format, "truncated file: data section would start at " +
                                      std::to_string(data_offset) + " past the end (" +
                                      std::to_string(size_) + " bytes)");
  file.data_offset_ = data_offset;
  for (size_t i = 0; i < file.tensors_.size(); ++i) {
    GgufTensor& t = file.tensors_[i];
    context_ = "tensor '" + std::string(t.name) + "'";
    if (t.offset % file.alignment_ != 0)
      return fail(Errc::bad_format, "data offset " + std::to_string(t.offset) +
                                        " is not a multiple of the alignment " +
                                        std::to_string(file.alignment_));
    const uint64_t avail = size_ - data_offset;
    if (t.offset > avail || t.n_bytes > avail - t.offset)
      return fail(Errc::bad_format, "data [" + std::to_string(data_offset + t.offset) + ", " +
                                        std::to_string(data_offset + t.offset + t.n_bytes) +
                                        ") lies outside the file (" + std::to_string(size_) + " bytes)");
    t.data = p_ + data_offset + t.offset;
  }
  return file;
}

Result<GgufFile> GgufFile::parse(std::span<const uint8_t> bytes, std::string name,
                                 std::shared_ptr<const void> owner) {
  GgufFile file;
  file.name_ = std::move(name);
  file.owner_ = std::move(owner);
  file.size_ = bytes.size();
  const std::string err_name = file.name_;
  return GgufParser(bytes, err_name).run(std::move(file));
}

Result<GgufFile> GgufFile::open(const std::string& path) {
  auto mapped = MappedFile::open(path);
  if (!mapped) return mapped.error();
  const auto bytes = (*mapped)->bytes();
  return parse(bytes, path, *mapped);
}

const GgufValue* GgufFile::find(std::string_view key) const {
  const auto it = kv_index_.find(key);
  return it == kv_index_.end() ? nullptr : &kvs_[it->second].value;
}

const GgufTensor* GgufFile::find_tensor(std::string_view name) const {
  const auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

namespace {

Error missing(const std::string& file, std::string_view key) {
  return make_error(Errc::not_found, file + ": metadata key '" + std::string(key) + "' is missing");
}

Error wrong_type(const std::string& file, std::string_view key, const GgufValue& v, const char* expected) {
  std::string found(gguf_value_type_name(v.type));
  if (v.type == GgufValueType::array)
    found += " of " + std::string(gguf_value_type_name(std::get<GgufArray>(v.v).elem_type));
  return make_error(Errc::bad_format, file + ": metadata '" + std::string(key) + "' has type " + found +
                                          ", expected " + expected);
}

}  // namespace

Result<std::string_view> GgufFile::get_string(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(name_, key);
  if (v->type != GgufValueType::string) return wrong_type(name_, key, *v, "string");
  return std::get<std::string_view>(v->v);
}

Result<int64_t> GgufFile::get_int(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(name_, key);
  if (const auto* s = std::get_if<int64_t>(&v->v)) return *s;
  if (const auto* u = std::get_if<uint64_t>(&v->v)) {
    if (*u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return make_error(Errc::out_of_range, name_ + ": metadata '" + std::string(key) + "' value " +
                                                std::to_string(*u) + " is too large");
    return static_cast<int64_t>(*u);
  }
  return wrong_type(name_, key, *v, "an integer");
}

Result<uint64_t> GgufFile::get_uint(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(name_, key);
  if (const auto* u = std::get_if<uint64_t>(&v->v)) return *u;
  if (const auto* s = std::get_if<int64_t>(&v->v)) {
    if (*s < 0)
      return make_error(Errc::out_of_range, name_ + ": metadata '" + std::string(key) + "' is negative (" +
                                                std::to_string(*s) + ")");
    return static_cast<uint64_t>(*s);
  }
  return wrong_type(name_, key, *v, "an unsigned integer");
}

Result<double> GgufFile::get_float(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(name_, key);
  if (const auto* d = std::get_if<double>(&v->v)) return *d;
  return wrong_type(name_, key, *v, "float32 or float64");
}

Result<bool> GgufFile::get_bool(std::string_view key) const {
  const GgufValue* v = find(key);
  if (!v) return missing(name_, key);
  if (const auto* b = std::get_if<bool>(&v->v)) return *b;
  return wrong_type(name_, key, *v, "bool");
}

Result<const GgufArray*> GgufFile::get_array(std::string_view key, GgufValueType elem) const {
  const GgufValue* v = find(key);
  if (!v) return missing(name_, key);
  const auto* a = std::get_if<GgufArray>(&v->v);
  if (!a || a->elem_type != elem) {
    const std::string expected = "array of " + std::string(gguf_value_type_name(elem));
    return wrong_type(name_, key, *v, expected.c_str());
  }
  return a;
}

int64_t GgufArray::int_at(uint64_t i) const {
  const GgufValue v = read_scalar(elem_type, data + i * scalar_size(elem_type));
  if (const auto* s = std::get_if<int64_t>(&v.v)) return *s;
  if (const auto* u = std::get_if<uint64_t>(&v.v)) return static_cast<int64_t>(*u);
  if (const auto* d = std::get_if<double>(&v.v)) return static_cast<int64_t>(*d);
  return std::get<bool>(v.v) ? 1 : 0;
}

uint64_t GgufArray::uint_at(uint64_t i) const {
  return static_cast<uint64_t>(int_at(i));
}

double GgufArray::float_at(uint64_t i) const {
  const GgufValue v = read_scalar(elem_type, data + i * scalar_size(elem_type));
  if (const auto* d = std::get_if<double>(&v.v)) return *d;
  return static_cast<double>(int_at(i));
}

std::string_view gguf_value_type_name(GgufValueType t) {
  switch (t) {
    case GgufValueType::u8: return "uint8";
    case GgufValueType::i8: return "int8";
    case GgufValueType::u16: return "uint16";
    case GgufValueType::i16: return "int16";
    case GgufValueType::u32: return "uint32";
    case GgufValueType::i32: return "int32";
    case GgufValueType::f32: return "float32";
    case GgufValueType::boolean: return "bool";
    case GgufValueType::string: return "string";
    case GgufValueType::array: return "array";
    case GgufValueType::u64: return "uint64";
    case GgufValueType::i64: return "int64";
    case GgufValueType::f64: return "float64";
  }
  return "unknown";
}

namespace {

std::string quote(std::string_view s, size_t max_len = 60) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size() && i < max_len; ++i) {
    const char c = s[i];
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '"')
      out += "\\\"";
    else if (static_cast<unsigned char>(c) < 32)
      out += '?';
    else
      out += c;
  }
  if (s.size() > max_len) out += "...";
  return out + "\"";
}

}  // namespace

std::string GgufValue::to_string(size_t max_array_items) const {
  if (const auto* u = std::get_if<uint64_t>(&v)) return std::to_string(*u);
  if (const auto* s = std::get_if<int64_t>(&v)) return std::to_string(*s);
  if (const auto* d = std::get_if<double>(&v)) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%g", *d);
    return buf;
  }
  if (const auto* b = std::get_if<bool>(&v)) return *b ? "true" : "false";
  if (const auto* s = std::get_if<std::string_view>(&v)) return quote(*s);
  const auto& a = std::get<GgufArray>(v);
  std::string out =
      "[" + std::string(gguf_value_type_name(a.elem_type)) + " x " + std::to_string(a.count) + "]";
  const uint64_t shown = std::min<uint64_t>(a.count, max_array_items);
  if (shown > 0) {
    out += " ";
    for (uint64_t i = 0; i < shown; ++i) {
      if (i) out += ", ";
      if (a.elem_type == GgufValueType::string)
        out += quote(a.strings[i], 24);
      else if (a.elem_type == GgufValueType::f32 || a.elem_type == GgufValueType::f64) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%g", a.float_at(i));
        out += buf;
      } else
        out += std::to_string(a.int_at(i));
    }
    if (a.count > shown) out += ", ...";
  }
  return out;
}

std::string GgufTensor::shape_string() const {
  std::string s = "[";
  for (int d = 0; d < n_dims; ++d) {
    if (d) s += ", ";
    s += std::to_string(ne[d]);
  }
  return s + "]";
}

}  // namespace chorus
