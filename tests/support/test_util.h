// Shared test helpers: locating goldens and the default model.
#pragma once

#include <gtest/gtest.h>

#include <sys/stat.h>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "engine/model/gguf.h"
#include "engine/model/model_paths.h"

namespace chorus::test {

// $CHORUS_GOLDENS_DIR (set by scripts/gpu_check.sh, whose checkout lies elsewhere on the GPU
// machine), else this checkout's.
inline std::string goldens_dir() {
  const char* env = std::getenv("CHORUS_GOLDENS_DIR");
  return env && *env ? env : CHORUS_GOLDENS_DIR;
}

inline std::optional<nlohmann::json> load_golden(const std::string& file) {
  std::ifstream in(goldens_dir() + "/" + file);
  if (!in) return std::nullopt;
  return nlohmann::json::parse(in);
}

inline std::string from_hex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

inline bool file_exists(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0;
}

// The default model, or nullptr (the test then skips) when it has not been fetched.
// scripts/setup.sh fetches it, so CI always has it; CHORUS_REQUIRE_MODEL=1 turns a missing
// model into a failure instead of a skip.
inline const GgufFile* default_model() {
  static std::optional<Result<GgufFile>> cached;
  if (!cached) cached.emplace(GgufFile::open(default_model_path()));
  if (cached->ok()) return &cached->value();
  return nullptr;
}

#define CHORUS_REQUIRE_DEFAULT_MODEL(var)                                           \
  const ::chorus::GgufFile* var = ::chorus::test::default_model();                  \
  if (var == nullptr) {                                                             \
    const char* req = std::getenv("CHORUS_REQUIRE_MODEL");                          \
    if (req && std::string(req) == "1")                                             \
      FAIL() << "default model missing: " << ::chorus::default_model_path();        \
    GTEST_SKIP() << "default model not found at " << ::chorus::default_model_path() \
                 << " (run scripts/setup.sh)";                                      \
  }

// An optional model: `file` in the goldens (committed test files), else in $CHORUS_HOME/models
// (fetched by scripts/setup.sh --with-gemma and the like); "" when neither has it.
inline std::string optional_model_path(const std::string& file) {
  for (const std::string& dir : {goldens_dir(), chorus_home() + "/models"})
    if (file_exists(dir + "/" + file)) return dir + "/" + file;
  return {};
}

}  // namespace chorus::test
