// Feeders: actors that bring outside text to a program's source role (actors/program_roles.h),
// each on a thread of its own — a file being appended to, a file descriptor (stdin, a pipe).
// The ZeroMQ feeders (a SUB source, a PUB sink) are in actors/node_port.h. The roles themselves
// are the topology roles (actors/program.h), for programs from a file or topology/builder.h.
#pragma once

#include <caf/actor.hpp>
#include <caf/fwd.hpp>
#include <string>

namespace chorus {

// Follows a file as it is appended to (like tail -f, from its current end or from the start):
// every complete line is sent to `target` as (role_atom, RoleText of line + "\n",
// schemas/roles.fbs). A detached actor that
// polls every `poll_ms`; ends on stop_atom or an exit message.
caf::actor spawn_file_tail(caf::actor_system& sys, const std::string& path, caf::actor target,
                           bool from_start = true, int poll_ms = 20);
// Reads lines from a file descriptor (stdin: 0, a pipe, a socket) as they arrive: each complete
// line goes to `target` as a RoleText (line + "\n"); at end of input the last partial line (if
// any) goes too, then `notify` (if set) gets a FeedEnded and the actor ends. stop_atom or an exit
// message ends it earlier (also with FeedEnded). A detached actor; the fd is not closed.
caf::actor spawn_fd_lines(caf::actor_system& sys, int fd, caf::actor target, caf::actor notify = {},
                          int poll_ms = 20);

}  // namespace chorus
