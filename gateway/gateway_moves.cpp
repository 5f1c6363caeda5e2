#include "gateway/gateway_moves.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "engine/forward/kv_cache.h"
#include "gateway/gateway_programs.h"
#include "net/block_transfer.h"

namespace chorus {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

std::shared_ptr<CarriedBlock> carry_out(GatewayPrograms& from, const std::string& id, BlockId block,
                                        const std::string& text, const MoveCost& cost,
                                        const std::string& node) {
  if (cost.by == MoveCost::By::recompute || text.empty()) return nullptr;
  const FrameCall call = [&from](const Frame& f) { return from.call(f); };
  const auto t0 = std::chrono::steady_clock::now();
  // The first part is small: it says what the whole would cost before the rest is sent.
  auto head = call(encode_export_block(0, block, 0, 64 << 10));
  if (!head || head->kind != ReplyKind::block_part || !head->part) {
    spdlog::info("gateway: program `{}` leaves `{}` without its KV ({}): it is recomputed", id, node,
                 head ? "the node answered no image" : head.error().message);
    return nullptr;
  }
  const uint64_t bytes = head->part->total;
  const int64_t cached = head->part->cached;
  const double send_s = cost.transfer_s(bytes), again_s = cost.recompute_s(cached);
  if (cost.by == MoveCost::By::cost && send_s >= again_s) {
    spdlog::info(
        "gateway: program `{}` leaves `{}` without its KV: {} positions recompute in {:.3f} s, "
        "{:.1f} MB send in {:.3f} s",
        id, node, cached, again_s, static_cast<double>(bytes) / 1e6, send_s);
    (void)call(encode_export_block(0, block, bytes));  // ends the export there (an empty last part)
    return nullptr;
  }
  auto carried = std::make_shared<CarriedBlock>();
  auto image = fetch_block(call, block, kBlockPartBytes, head->part);  // the rest, from the same export
  if (!image) {
    spdlog::info("gateway: program `{}` leaves `{}` without its KV ({}): it is recomputed", id, node,
                 image.error().message);
    return nullptr;
  }
  carried->image = std::move(*image);
  carried->text = text;
  carried->export_s = seconds_since(t0);
  spdlog::info(
      "gateway: program `{}` takes its KV from `{}`: {} positions, {:.1f} MB in {:.3f} s "
      "(recomputing them: about {:.3f} s)",
      id, node, cached, static_cast<double>(bytes) / 1e6, carried->export_s, again_s);
  return carried;
}

bool carry_in(GatewayPrograms& to, const std::string& id, BlockId block, const CarriedBlock& carried,
              const std::string& node) {
  const FrameCall call = [&to](const Frame& f) { return to.call(f); };
  const auto t0 = std::chrono::steady_clock::now();
  if (Status s = send_block(call, block, carried.image); !s.ok()) {
    spdlog::warn("gateway: program `{}` cannot load its KV on `{}` ({}): it is recomputed", id, node,
                 s.error().message);
    return false;
  }
  to.set_contents(id, carried.text, static_cast<int64_t>(carried.image.tokens.size()));
  spdlog::info("gateway: program `{}` loaded its KV on `{}` in {:.3f} s", id, node, seconds_since(t0));
  return true;
}

}  // namespace chorus
