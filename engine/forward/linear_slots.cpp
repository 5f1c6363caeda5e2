#include "engine/forward/linear_slots.h"

#include <string>

#include "engine/forward/linear_state.h"

namespace chorus {

LinearSlots::LinearSlots(int n) : free_(std::make_shared<Free>()) {
  free_->n = n;
  for (int32_t i = n - 1; i >= 0; --i) free_->ids.push_back(i);
}

int LinearSlots::capacity() const {
  return free_->n;
}

int LinearSlots::in_use() const {
  std::lock_guard<std::mutex> lock(free_->mu);
  return free_->n - static_cast<int>(free_->ids.size());
}

Status LinearSlots::acquire(LinearState& s) {
  int32_t id = -1;
  {
    std::lock_guard<std::mutex> lock(free_->mu);
    if (free_->ids.empty()) return make_error(Errc::out_of_memory, exhausted_message());
    id = free_->ids.back();
    free_->ids.pop_back();
  }
  std::weak_ptr<Free> owner = free_;
  s.slot = std::shared_ptr<const int32_t>(new int32_t(id), [owner](const int32_t* p) {
    if (auto f = owner.lock()) {
      std::lock_guard<std::mutex> lock(f->mu);
      f->ids.push_back(*p);
    }
    delete p;
  });
  s.slot_owner = this;
  return Status::success();
}

std::string LinearSlots::exhausted_message() const {
  return "all " + std::to_string(capacity()) +
         " linear-state slots are in use (one per block of a hybrid model being written or read; "
         "EngineOptions::linear_slots, --linear-slots)";
}

bool LinearSlots::holds(const LinearState& s) const {
  return s.slot && s.slot_owner == this;
}

}  // namespace chorus
