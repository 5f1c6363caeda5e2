#include "actors/role_messages.h"

#include <spdlog/spdlog.h>

namespace chorus {

std::optional<RoleMessage> read_role(const std::string& who, const Frame& frame) {
  auto m = decode_role(frame);
  if (m) return std::move(*m);
  spdlog::warn("{}: dropped a message that is not a role message: {}", who, m.error().message);
  return std::nullopt;
}

void unexpected_role(const std::string& who, const RoleMessage& m) {
  spdlog::warn("{}: dropped a {} message, which it does not take", who, role_kind_name(m.kind));
}

}  // namespace chorus
