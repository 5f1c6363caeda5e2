#include "device/cpu_device.h"

#include <cstdlib>

#include "device/cpu_features.h"

namespace chorus {
namespace {

bool supports_avx2(const CpuFeatures& f) {
  return f.avx2 && f.fma && f.f16c;
}
bool supports_avx512(const CpuFeatures& f) {
  return supports_avx2(f) && f.avx512f && f.avx512bw && f.avx512vl && f.avx512vnni;
}

}  // namespace

const CpuKernels& best_cpu_kernels() {
  const CpuFeatures& f = cpu_features();
  if (supports_avx512(f) && cpu_kernels_avx512()) return *cpu_kernels_avx512();
  if (supports_avx2(f) && cpu_kernels_avx2()) return *cpu_kernels_avx2();
  return cpu_kernels_scalar();
}

Result<std::unique_ptr<CpuDevice>> CpuDevice::create(const CpuDeviceOptions& opts) {
  std::string isa = opts.isa;
  if (isa.empty())
    if (const char* e = std::getenv("CHORUS_ISA"); e && *e) isa = e;
  int threads = opts.n_threads;
  if (threads <= 0)
    if (const char* e = std::getenv("CHORUS_THREADS"); e && *e) threads = std::atoi(e);
  const CpuFeatures& f = cpu_features();
  const CpuKernels* k = nullptr;
  if (isa.empty())
    k = &best_cpu_kernels();
  else if (isa == "scalar")
    k = &cpu_kernels_scalar();
  else if (isa == "avx2")
    k = supports_avx2(f) ? cpu_kernels_avx2() : nullptr;
  else if (isa == "avx512")
    k = supports_avx512(f) ? cpu_kernels_avx512() : nullptr;
  else
    return make_error(Errc::invalid_argument, "unknown ISA '" + isa + "' (choose scalar, avx2 or avx512)");
  if (k == nullptr)
    return make_error(Errc::unsupported, "this CPU cannot run the " + isa + " kernels (" + f.summary() + ")");
  bool llama_order = opts.llama_order;
  if (const char* e = std::getenv("CHORUS_LLAMA_ORDER"); e && *e)
    llama_order = llama_order || std::atoi(e) != 0;
  KvType kv_type = opts.kv_type.value_or(KvType::f32);
  if (const char* e = std::getenv("CHORUS_KV_TYPE"); e && *e && !opts.kv_type) {
    auto t = parse_kv_type(e);
    if (!t) return make_error(Errc::invalid_argument, "CHORUS_KV_TYPE: " + t.error().message);
    kv_type = *t;
  }
  return std::unique_ptr<CpuDevice>(
      new CpuDevice(k, threads > 0 ? threads : f.n_cores, llama_order, kv_type));
}

std::optional<KvType> kv_type_flag(const std::string& flag) {
  if (flag.empty()) return std::nullopt;
  const auto t = parse_kv_type(flag);
  return t ? *t : KvType::f32;
}

Result<KvType> parse_kv_type(const std::string& name) {
  if (name == "f32") return KvType::f32;
  if (name == "f16") return KvType::f16;
  return make_error(Errc::invalid_argument, "unknown KV cache type '" + name + "' (choose f32 or f16)");
}

std::string CpuDevice::describe() const {
  return std::string("cpu ") + kernels_->isa + ", " + std::to_string(pool_.size()) + " threads" +
         (llama_order_ ? ", llama.cpp's order" : "") + (kv_type_ == KvType::f16 ? ", f16 KV cache" : "");
}

}  // namespace chorus
