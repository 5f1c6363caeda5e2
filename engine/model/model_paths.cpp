#include "engine/model/model_paths.h"

#include <cstdlib>

namespace chorus {

std::string chorus_home() {
  if (const char* h = std::getenv("CHORUS_HOME"); h && *h) return h;
  const char* home = std::getenv("HOME");
  return std::string(home && *home ? home : "/tmp") + "/.cache/chorus";
}

std::string default_model_path() {
  if (const char* m = std::getenv("CHORUS_MODEL"); m && *m) return m;
  return chorus_home() + "/models/" + kDefaultModelFile;
}

}  // namespace chorus
