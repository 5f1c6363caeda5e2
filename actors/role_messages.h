// Reading the messages between a program's actors (schemas/roles.fbs, net/role_codec.h) in the
// actors that receive them. Internal to actors/.
#pragma once

#include <optional>

#include "net/role_codec.h"

namespace chorus {

// The message `frame` carries, checked; a frame that is not a role message is logged with the
// reason and with `who` got it, and dropped (nothing else reads it).
std::optional<RoleMessage> read_role(const std::string& who, const Frame& frame);
// A role message of a kind `who` does not take: logged and dropped.
void unexpected_role(const std::string& who, const RoleMessage& m);

}  // namespace chorus
