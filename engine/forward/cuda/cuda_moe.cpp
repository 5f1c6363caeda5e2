// Mixture-of-experts layers on a CUDA device (engine/forward/cuda/cuda_moe.h).
#include "engine/forward/cuda/cuda_moe.h"

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "device/cuda_device.h"
#include "engine/forward/cuda/cuda_op.h"
#include "engine/forward/cuda/cuda_weights.h"
#include "kernels/cpu/dequant.h"

namespace chorus {

using cuda_detail::op;

struct CudaMoe::Impl {
  const ModelConfig& c;
  CudaDevice& dev;
  struct Layer {
    const float* router = nullptr;                                          // [n_expert][n_embd] f32
    const float* sh_router = nullptr;                                       // [n_embd] f32
    const cuda::bf16_bits *gate = nullptr, *up = nullptr, *down = nullptr;  // stacked experts
    CudaMat sh_gate, sh_up, sh_down;
  };
  std::vector<Layer> layers;  // [n_layer]
  // Scratch [max_tokens][...]: router logits, slots, the experts' activations and outputs, the
  // shared expert's products (and their bf16 input), its gate.
  float *logits = nullptr, *slot_weight = nullptr, *act = nullptr, *slot_out = nullptr, *sg = nullptr,
        *su = nullptr, *shared = nullptr, *shared_logit = nullptr;
  int32_t *slot_expert = nullptr, *first = nullptr, *slots = nullptr, *active = nullptr;
  cuda::bf16_bits* xb = nullptr;

  Impl(const ModelConfig& config, CudaDevice& device) : c(config), dev(device) {}

  Status gemm(const CudaMat& m, float* out, int T) {
    return cuda_gemm_bf16(dev, m.w, xb, out, m.rows, T, m.cols);
  }

  // One stacked [n_expert][rows][cols] bf16 matrix: in one upload when the file holds the
  // experts back to back (one 3-D tensor), else expert by expert.
  Result<const cuda::bf16_bits*> experts(const std::vector<WeightMatrix>& m, const std::string& name) {
    const WeightMatrix& e0 = m.front();
    auto dst = dev.alloc(static_cast<int64_t>(m.size()) * e0.rows * e0.cols * 2, name);
    if (!dst) return dst.error();
    auto* out = static_cast<cuda::bf16_bits*>(*dst);
    bool packed = true;
    for (size_t e = 0; e < m.size(); ++e)
      packed = packed && m[e].type == e0.type && m[e].row_bytes == e0.row_bytes &&
               m[e].data == e0.data + static_cast<int64_t>(e) * e0.rows * static_cast<int64_t>(e0.row_bytes);
    if (packed) {
      WeightMatrix all = e0;
      all.rows = e0.rows * static_cast<int64_t>(m.size());
      if (Status s = cuda_upload_matrix_into(dev, all, out, name.c_str()); !s.ok()) return s.error();
    } else {
      for (size_t e = 0; e < m.size(); ++e)
        if (Status s = cuda_upload_matrix_into(dev, m[e], out + static_cast<int64_t>(e) * e0.rows * e0.cols,
                                               name.c_str());
            !s.ok())
          return s.error();
    }
    return static_cast<const cuda::bf16_bits*>(out);
  }
};

CudaMoe::CudaMoe(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudaMoe::~CudaMoe() = default;

Status CudaMoe::check(const ModelConfig& c, const Weights& w) {
  auto unsupported = [&](const std::string& what) {
    return make_error(Errc::unsupported, "the CUDA runner does not run " + what + " yet (" + c.arch + ")");
  };
  if (c.n_expert > cuda::kMaxMoeExperts || c.n_expert_used < 1 || c.n_expert_used > cuda::kMaxMoeUsed ||
      c.n_expert_used > c.n_expert)
    return unsupported("mixture-of-experts layers choosing " + std::to_string(c.n_expert_used) + " of " +
                       std::to_string(c.n_expert) + " experts (1.." + std::to_string(cuda::kMaxMoeUsed) +
                       " of at most " + std::to_string(cuda::kMaxMoeExperts) + ")");
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string blk = "blk." + std::to_string(l) + ".";
    if (!can_dequantize(L.router.type))
      return make_error(Errc::unsupported, "the CUDA runner cannot read " + blk + "ffn_gate_inp (" +
                                               std::string(tensor_type_name(L.router.type)) + ")");
    if (static_cast<int>(L.exp_gate.size()) != c.n_expert || L.exp_up.size() != L.exp_gate.size() ||
        L.exp_down.size() != L.exp_gate.size())
      return make_error(Errc::bad_format,
                        blk + "ffn_{gate,up,down}_exps: " + std::to_string(L.exp_gate.size()) +
                            " experts, the model has " + std::to_string(c.n_expert));
    std::vector<std::pair<const WeightMatrix*, std::string>> mats = {
        {&L.sh_gate, "ffn_gate_shexp"}, {&L.sh_up, "ffn_up_shexp"}, {&L.sh_down, "ffn_down_shexp"}};
    for (size_t e = 0; e < L.exp_gate.size(); ++e)
      for (const auto& [m, n] :
           {std::pair{&L.exp_gate[e], "ffn_gate_exps"}, std::pair{&L.exp_up[e], "ffn_up_exps"},
            std::pair{&L.exp_down[e], "ffn_down_exps"}})
        mats.emplace_back(m, n);
    for (const auto& [m, n] : mats)
      if (m->rows > 0 && !cuda::converts_to_bf16(static_cast<int>(m->type)))
        return make_error(Errc::unsupported, "the CUDA runner cannot convert " + blk + n + " (" +
                                                 std::string(tensor_type_name(m->type)) +
                                                 "): " + cuda::bf16_conversions() + " weights so far");
  }
  return Status::success();
}

Result<std::unique_ptr<CudaMoe>> CudaMoe::create(const ModelConfig& c, const Weights& w, CudaDevice& dev,
                                                 int max_tokens) {
  if (Status s = check(c, w); !s.ok()) return s.error();
  auto impl = std::make_unique<Impl>(c, dev);
  Impl& m = *impl;
  const int64_t E = c.n_embd, NE = c.n_expert, NU = c.n_expert_used;
  for (size_t l = 0; l < w.layers.size(); ++l) {
    const LayerWeights& L = w.layers[l];
    const std::string blk = "blk." + std::to_string(l) + ".";  // names in errors (the pool too small)
    Impl::Layer D;
    auto router = cuda_upload_matrix_f32(dev, L.router, (blk + "ffn_gate_inp").c_str());
    if (!router) return router.error();
    D.router = *router;
    auto sh_router = cuda_upload_vec(dev, L.sh_router, E, (blk + "ffn_gate_inp_shexp").c_str());
    if (!sh_router) return sh_router.error();
    D.sh_router = *sh_router;
    for (auto [dst, src, name] :
         {std::tuple{&D.gate, &L.exp_gate, "ffn_gate_exps"}, std::tuple{&D.up, &L.exp_up, "ffn_up_exps"},
          std::tuple{&D.down, &L.exp_down, "ffn_down_exps"}}) {
      auto r = m.experts(*src, blk + name);
      if (!r) return r.error();
      *dst = *r;
    }
    if (L.sh_router && L.sh_gate.rows > 0)
      for (auto [dst, src, name] : {std::tuple{&D.sh_gate, &L.sh_gate, "ffn_gate_shexp"},
                                    std::tuple{&D.sh_up, &L.sh_up, "ffn_up_shexp"},
                                    std::tuple{&D.sh_down, &L.sh_down, "ffn_down_shexp"}}) {
        auto r = cuda_upload_matrix(dev, *src, (blk + name).c_str());
        if (!r) return r.error();
        *dst = *r;
      }
    m.layers.push_back(D);
  }
  const int64_t T = max_tokens, FE = c.n_ff_exp, FS = std::max(c.n_ff_shexp, 1);
  for (auto [dst, n] :
       {std::pair{&m.logits, T * NE}, std::pair{&m.slot_weight, T * NU}, std::pair{&m.act, T * NU * FE},
        std::pair{&m.slot_out, T * NU * E}, std::pair{&m.sg, T * FS}, std::pair{&m.su, T * FS},
        std::pair{&m.shared, T * E}, std::pair{&m.shared_logit, T}}) {
    auto r = dev.alloc(n * 4, "mixture-of-experts activations");
    if (!r) return r.error();
    *dst = static_cast<float*>(*r);
  }
  for (auto [dst, n] : {std::pair{&m.slot_expert, T * NU}, std::pair{&m.first, NE + 1},
                        std::pair{&m.slots, T * NU}, std::pair{&m.active, NE + 1}}) {
    auto r = dev.alloc(n * 4, "mixture-of-experts routing");
    if (!r) return r.error();
    *dst = static_cast<int32_t*>(*r);
  }
  auto xb = dev.alloc(T * std::max(E, FS) * 2, "mixture-of-experts bf16 inputs");
  if (!xb) return xb.error();
  m.xb = static_cast<cuda::bf16_bits*>(*xb);
  return std::unique_ptr<CudaMoe>(new CudaMoe(std::move(impl)));
}

Status CudaMoe::layer(int l, float* h, float* x, int T) {
  Impl& m = *impl_;
  const Impl::Layer& L = m.layers[static_cast<size_t>(l)];
  const ModelConfig& c = m.c;
  void* st = m.dev.stream();
  const int E = c.n_embd, NE = c.n_expert, NU = c.n_expert_used, FE = c.n_ff_exp;
  // Routing: f32 logits, softmax and the top experts; the slots grouped by expert.
  CHORUS_TRY(op(cuda::rows_dot_f32(L.router, NE, E, h, T, m.logits, st), "ffn_gate_inp"));
  CHORUS_TRY(
      op(cuda::moe_route(m.logits, T, NE, NU, c.expert_weights_scale, m.slot_expert, m.slot_weight, st),
         "moe route"));
  CHORUS_TRY(op(cuda::moe_sort(m.slot_expert, T * NU, NE, m.first, m.slots, m.active, st), "moe sort"));
  // Experts: silu(gate x) * up x per slot, then down, weighted.
  CHORUS_TRY(
      op(cuda::moe_experts(
             {L.gate, L.up, h, false, nullptr, m.first, m.slots, m.active, NE, NU, T * NU, FE, E, m.act}, st),
         "ffn_gate_exps/ffn_up_exps"));
  CHORUS_TRY(op(cuda::moe_experts({L.down, nullptr, m.act, true, m.slot_weight, m.first, m.slots, m.active,
                                   NE, NU, T * NU, E, FE, m.slot_out},
                                  st),
                "ffn_down_exps"));
  // The shared expert and its gate, then everything into x in the CPU's order.
  const bool shared = L.sh_router && L.sh_gate.w;
  if (shared) {
    const int FS = c.n_ff_shexp;
    CHORUS_TRY(op(cuda::to_bf16(h, m.xb, int64_t{T} * E, st), "to_bf16"));
    CHORUS_TRY(m.gemm(L.sh_gate, m.sg, T));
    CHORUS_TRY(m.gemm(L.sh_up, m.su, T));
    CHORUS_TRY(op(cuda::swiglu(m.sg, m.su, m.sg, int64_t{T} * FS, st), "swiglu (shared expert)"));
    CHORUS_TRY(op(cuda::to_bf16(m.sg, m.xb, int64_t{T} * FS, st), "to_bf16"));
    CHORUS_TRY(m.gemm(L.sh_down, m.shared, T));
    CHORUS_TRY(op(cuda::rows_dot_f32(L.sh_router, 1, E, h, T, m.shared_logit, st), "ffn_gate_inp_shexp"));
  }
  return op(cuda::moe_combine(m.slot_out, T, NU, E, shared ? m.shared : nullptr, m.shared_logit, x, st),
            "moe combine");
}

}  // namespace chorus
