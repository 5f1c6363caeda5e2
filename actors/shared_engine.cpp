// SharedEngine (actors/program.h): one engine and its batcher that several programs run on.
#include <caf/all.hpp>

#include "actors/batcher.h"
#include "actors/program.h"
#include "actors/program_manager.h"
#include "engine/model/model.h"
#include "engine/step/engine.h"

namespace chorus {

EngineOptions engine_options(const topology::Topology& t) {
  EngineOptions eo;
  eo.n_pages = t.engine.pages;
  eo.token_budget = t.engine.token_budget;
  eo.max_view_tokens = t.engine.max_view_tokens;
  eo.linear_slots = t.engine.linear_slots;
  return eo;
}

struct SharedEngine::Impl {
  std::shared_ptr<Engine> engine;  // null: remote
  const Model* model = nullptr;
  std::string where;                    // remote: describe()
  ProgramManager* scheduler = nullptr;  // remote: the node's scheduler (not owned)
  caf::actor batcher;
  std::atomic<uint64_t> next_program{1};
  int64_t pool_pages = 0;
  std::unique_ptr<ProgramManager> manager;  // before the batcher stops: it talks to it
};

SharedEngine::SharedEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

SharedEngine::~SharedEngine() {
  impl_->manager.reset();
  if (!impl_->batcher || !impl_->engine) return;  // a remote node's memory actor is not ours to stop
  caf::scoped_actor self{impl_->batcher.home_system()};
  self->send_exit(impl_->batcher, caf::exit_reason::user_shutdown);
  self->wait_for(impl_->batcher);
}

Result<std::shared_ptr<SharedEngine>> SharedEngine::create(caf::actor_system& sys, const Model& model,
                                                           CpuDevice& device, const EngineOptions& opts,
                                                           CudaDevice* gpu) {
  auto engine = Engine::create(model, device, opts, gpu);
  if (!engine) return engine.error();
  auto impl = std::make_unique<Impl>();
  impl->engine = std::shared_ptr<Engine>(std::move(*engine));
  impl->model = &model;
  impl->pool_pages = opts.n_pages;
  impl->batcher = spawn_batcher(sys, impl->engine);
  return std::shared_ptr<SharedEngine>(new SharedEngine(std::move(impl)));
}

std::shared_ptr<SharedEngine> SharedEngine::remote(const Model& model, caf::actor memory, int64_t pages,
                                                   ProgramManager* scheduler, std::string where) {
  auto impl = std::make_unique<Impl>();
  impl->model = &model;
  impl->where = std::move(where);
  impl->scheduler = scheduler;
  impl->batcher = std::move(memory);
  impl->pool_pages = pages;
  return std::shared_ptr<SharedEngine>(new SharedEngine(std::move(impl)));
}

const Model& SharedEngine::model() const {
  return *impl_->model;
}
std::string SharedEngine::describe() const {
  return impl_->engine ? impl_->engine->describe() : impl_->where;
}
caf::actor SharedEngine::batcher() const {
  return impl_->batcher;
}
uint64_t SharedEngine::new_program_id() {
  // Scheduled: the scheduler's ids, which its other clients (a gateway) draw from too.
  if (ProgramManager* m = manager()) return m->new_program_id();
  return impl_->next_program++;
}
std::shared_ptr<const EngineCounters> SharedEngine::counters() const {
  return impl_->engine ? impl_->engine->counters() : nullptr;
}

int64_t SharedEngine::pool_pages() const {
  return impl_->pool_pages;
}

ProgramManager& SharedEngine::schedule(const ProgramPolicyOptions& opts, double tool_lease_s) {
  SchedulerOptions o;
  o.policy = opts;
  o.policy.capacity_pages = pool_pages();
  o.tool_lease_s = tool_lease_s;
  o.first_program_id = impl_->next_program;  // after those given out already
  impl_->manager = std::make_unique<ProgramManager>(impl_->batcher.home_system(), impl_->batcher, o);
  return *impl_->manager;
}

ProgramManager* SharedEngine::manager() const {
  return impl_->scheduler ? impl_->scheduler : impl_->manager.get();
}

}  // namespace chorus
