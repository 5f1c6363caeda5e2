// The CPU device: the kernel table chosen for this CPU and the compute thread pool.
// The ISA is picked once, at construction, from the CPU's features; CHORUS_ISA=scalar|avx2|
// avx512 (environment) or DeviceOptions::isa forces one (an unavailable choice is an error).
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "device/thread_pool.h"
#include "kernels/cpu/cpu_kernels.h"

namespace chorus {

struct CpuDeviceOptions {
  int n_threads = 0;  // 0: one per core (also $CHORUS_THREADS)
  std::string isa;    // "", "scalar", "avx2", "avx512" (also $CHORUS_ISA)
  // Q4_0, Q4_1 and Q8_0 matrices on llama.cpp's row kernels and its order of operations, so that
  // a model whose integer matrices are of those types gives llama.cpp's logits to the bit (also
  // $CHORUS_LLAMA_ORDER=1). Off, they run on weight panels, their sums in another order: no
  // farther from the exact arithmetic than llama.cpp's, and faster (docs/engine.md#kernels).
  bool llama_order = false;
  // The KV cache's element type: f32 exact (llama.cpp's f32 set-up, to the bit where the other
  // operations are in its order), f16 half the pages' bytes and attention's reads
  // (docs/engine.md#the-kv-caches-type). Unset: $CHORUS_KV_TYPE (f32 or f16), else f32.
  std::optional<KvType> kv_type;
};

class CpuDevice {
 public:
  static Result<std::unique_ptr<CpuDevice>> create(const CpuDeviceOptions& opts = {});

  const CpuKernels& kernels() const { return *kernels_; }
  ThreadPool& pool() { return pool_; }
  int n_threads() const { return pool_.size(); }
  std::string describe() const;  // e.g. "cpu avx512, 2 threads"
  bool llama_order() const { return llama_order_; }
  KvType kv_type() const { return kv_type_; }

 private:
  CpuDevice(const CpuKernels* k, int n_threads, bool llama_order, KvType kv_type)
      : kernels_(k), pool_(n_threads), llama_order_(llama_order), kv_type_(kv_type) {}
  const CpuKernels* kernels_;
  ThreadPool pool_;
  bool llama_order_;
  KvType kv_type_;
};

// The best kernel table this CPU supports.
const CpuKernels& best_cpu_kernels();

// "f32" or "f16" (CpuDeviceOptions::kv_type, --kv-type, $CHORUS_KV_TYPE). Errors name the choices.
Result<KvType> parse_kv_type(const std::string& name);
// A `--kv-type` flag as CpuDeviceOptions::kv_type: unset for "" (the environment decides).
// REQUIRES: "", "f32" or "f16" (the command line checks it).
std::optional<KvType> kv_type_flag(const std::string& flag);

}  // namespace chorus
