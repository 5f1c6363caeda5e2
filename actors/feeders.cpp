#include "actors/feeders.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <unistd.h>
#include <caf/all.hpp>
#include <cerrno>
#include <cstring>

#include "actors/atoms.h"
#include "net/role_codec.h"

namespace chorus {
namespace {

// Sends each complete line of `partial` to `target` as a RoleText (line + "\n") and keeps the rest.
void send_lines(caf::blocking_actor* self, const caf::actor& target, std::string& partial) {
  size_t start = 0;
  for (size_t nl; (nl = partial.find('\n', start)) != std::string::npos; start = nl + 1)
    self->send(target, role_atom::value, encode_role_text(partial.substr(start, nl + 1 - start)));
  partial.erase(0, start);
}

void file_tail(caf::blocking_actor* self, std::string path, caf::actor target, bool from_start, int poll_ms) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f != nullptr && !from_start) std::fseek(f, 0, SEEK_END);
  std::string partial;
  for (bool running = true; running;) {
    self->receive([&](stop_atom) { running = false; }, [&](caf::exit_msg&) { running = false; },
                  caf::after(std::chrono::milliseconds(poll_ms)) >> [] {});
    if (f == nullptr) f = std::fopen(path.c_str(), "rb");  // not there yet: keep trying
    if (f == nullptr || !running) continue;
    char buf[4096];
    for (size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) partial.append(buf, n);
    std::clearerr(f);  // at EOF: keep polling for what is appended next
    send_lines(self, target, partial);
  }
  if (f != nullptr) std::fclose(f);
}

void fd_lines(caf::blocking_actor* self, int fd, caf::actor target, caf::actor notify, int poll_ms) {
  std::string partial;
  for (bool running = true; running;) {
    self->receive([&](stop_atom) { running = false; }, [&](caf::exit_msg&) { running = false; },
                  caf::after(std::chrono::seconds(0)) >> [] {});
    if (!running) break;
    pollfd p{fd, POLLIN, 0};
    const int ready = ::poll(&p, 1, poll_ms);
    if (ready == 0 || (ready < 0 && errno == EINTR)) continue;
    char buf[4096];
    const ssize_t n = ready < 0 ? -1 : ::read(fd, buf, sizeof buf);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n > 0) {
      partial.append(buf, static_cast<size_t>(n));
      send_lines(self, target, partial);
      continue;
    }
    // End of input (or an error reading it): the last line even without a newline, then done.
    if (n < 0) spdlog::error("reading fd {}: {}", fd, std::strerror(errno));
    if (!partial.empty()) self->send(target, role_atom::value, encode_role_text(partial));
    running = false;
  }
  if (notify) self->send(notify, role_atom::value, encode_feed_ended());
}

}  // namespace

caf::actor spawn_fd_lines(caf::actor_system& sys, int fd, caf::actor target, caf::actor notify, int poll_ms) {
  return sys.spawn<caf::detached>(fd_lines, fd, std::move(target), std::move(notify), poll_ms);
}

caf::actor spawn_file_tail(caf::actor_system& sys, const std::string& path, caf::actor target,
                           bool from_start, int poll_ms) {
  return sys.spawn<caf::detached>(file_tail, path, std::move(target), from_start, poll_ms);
}

}  // namespace chorus
