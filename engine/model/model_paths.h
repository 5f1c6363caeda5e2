// Where models live: $CHORUS_HOME (default ~/.cache/chorus) holds models/ with the default
// model fetched by scripts/setup.sh. $CHORUS_MODEL overrides the default model's path.
#pragma once

#include <string>

namespace chorus {

inline constexpr const char* kDefaultModelFile = "SmolLM2-135M-Instruct.Q4_1.gguf";
inline constexpr const char* kDefaultModelSha256 =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";

std::string chorus_home();         // $CHORUS_HOME, else $HOME/.cache/chorus
std::string default_model_path();  // $CHORUS_MODEL, else chorus_home()/models/<default file>

}  // namespace chorus
