#include "actors/runtime_check.h"

#include <caf/all.hpp>
#include <chrono>

#include "net/wire.h"

namespace chorus {
namespace {

using hello_atom = caf::atom_constant<caf::atom("hello")>;

caf::behavior hello_actor(caf::event_based_actor*) {
  return {[](hello_atom, uint64_t request_id, const std::string& node) {
    const auto bytes = encode_hello_envelope(request_id, node);
    return std::vector<char>(bytes.begin(), bytes.end());
  }};
}

}  // namespace

Result<RuntimeCheck> check_actor_runtime(int scheduler_threads) {
  caf::actor_system_config cfg;
  cfg.set("scheduler.max-threads", scheduler_threads < 1 ? 1 : scheduler_threads);
  caf::actor_system sys{cfg};
  auto actor = sys.spawn(hello_actor);
  Result<RuntimeCheck> result = make_error(Errc::internal, "no reply from the hello actor");
  {
    caf::scoped_actor self{sys};
    self->request(actor, std::chrono::seconds(10), hello_atom::value, uint64_t{7}, std::string("self-test"))
        .receive(
            [&](const std::vector<char>& frame) {
              const auto* p = reinterpret_cast<const uint8_t*>(frame.data());
              auto summary = decode_envelope({p, frame.size()});
              if (!summary) {
                result = summary.error();
                return;
              }
              if (summary->request_id != 7 || summary->payload_type != "Hello") {
                result = make_error(Errc::internal, "hello actor replied with the wrong envelope");
                return;
              }
              const int v = CAF_VERSION;
              result = RuntimeCheck{std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
                                        std::to_string(v % 100),
                                    summary->text};
            },
            [&](caf::error& err) {
              result = make_error(Errc::internal, "actor request failed: " + sys.render(err));
            });
    self->send_exit(actor, caf::exit_reason::user_shutdown);
  }
  return result;
}

}  // namespace chorus
