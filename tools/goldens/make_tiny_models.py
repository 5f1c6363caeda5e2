#!/usr/bin/env python3
"""Write tiny random-weight GGUF models for architecture/shape tests.

Files (written with gguf.GGUFWriter, fixed numpy seeds, so re-running gives
byte-identical files):

  tiny_llama.gguf      "llama", untied output.weight, matrices + token_embd Q8_0
  tiny_qwen2.gguf      "qwen2", q/k/v biases, tied output, matrices Q4_0,
                       token_embd Q8_0
  tiny_llama_f32.gguf  the same float weights as tiny_llama.gguf, all F32
  tiny_qwen3.gguf      "qwen3": per-head q/k RMSNorm, head_dim 64 set by
                       attention.key_length (q_dim 256 != n_embd), tied
                       output, matrices + token_embd Q8_0
  tiny_qwen35.gguf     "qwen35" hybrid: 4 layers, full attention every 2nd
                       (layers 1, 3: gated attention, q/k norm, head 32,
                       partial RoPE over 8 dims with IMROPE sections
                       [2, 1, 1, 0]), Gated DeltaNet in layers 0, 2 (2 key
                       heads, 4 value heads, head 16, conv kernel 4),
                       untied output, matrices + token_embd Q8_0
  tiny_qwen35moe.gguf  "qwen35moe": the same layers with mixture-of-experts
                       feed-forward (4 experts of 64, top 2, F32 router, a
                       shared expert of 96 gated by sigmoid)
  tiny_llama3_rope_f32.gguf "llama" F32 with rope_freqs.weight (Llama 3's RoPE frequency
                       divisors; here uniform in [1, 8] so every pair's angle moves)
  tiny_llama_yarn_f32.gguf "llama" F32 with YaRN: rope.scaling.type yarn, factor 4, original
                       context 64
  tiny_llama_kq.gguf   "llama", n_embd 256 (head 64), n_ff 512, untied output: written F32, then
                       quantized by llama.cpp's llama-quantize with one panel type per
                       matrix: attn_q, ffn_gate, token_embd Q4_K; attn_k Q5_K; attn_v,
                       ffn_down, output Q6_K; attn_output Q5_0; ffn_up Q5_1
  tiny_llama_iq4.gguf  as tiny_llama_kq, quantized by llama-quantize to IQ4_XS and IQ4_NL
                       (attn_q, attn_v, ffn_gate, ffn_down, output IQ4_XS; the others and
                       token_embd IQ4_NL)
  tiny_llama_q23k.gguf the same shape in Q2_K (attn_q, attn_output, ffn_up, token_embd) and Q3_K
                       (attn_k, attn_v, ffn_gate, ffn_down, output)
  tiny_gemma3_f32.gguf "gemma3": 3 layers, sliding windows of 8 on layers 0, 1 (their
                       own RoPE base), head 64, q/k norms, post-norms, GeGLU, a final
                       logit soft-cap, all F32 (GEMMA3 below)
  tiny_qwen3next_f32.gguf  "qwen3next": as qwen35moe, with value head h reading
                       key head h / 2 and beta/alpha packed per key head
                       (ssm_ba); all matrices F32 (no int8 activations, whose
                       rounding turns last-bit differences of the recurrence's
                       float order into visible logit differences)

Shapes: 2 layers, n_embd 128, 4 heads, 2 KV heads (GQA, head_dim 32),
n_ff 256, context 512. Norm weights are F32 (1 + N(0, 0.05)); matrices are
N(0, 0.05). Shapes are given in GGUF ne order ([n_in, n_out]); the numpy
arrays are the reverse ([n_out, n_in]), as GGUFWriter expects.

Tokenizer: tokenizer.ggml.model "gpt2", pre "default", a byte-level BPE vocab
of the 256 GPT-2 byte-alphabet tokens (in bytes_to_unicode order), MERGES
below (each adding its merged token) and two CONTROL tokens at the end,
<|endoftext|> (eos) and <|im_start|> (bos).

After writing, every file is loaded with llama_cpp.Llama (if importable) and
the last-position logits of a short token sequence are printed with their std.

Usage:
  make_tiny_models.py [--out tests/goldens] [--no-check] [--only FILE,...]
"""
import argparse
import hashlib
import os
import sys
import time

import numpy as np
import gguf
from gguf import GGMLQuantizationType as QT

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
DEFAULT_OUT = os.path.join(REPO, "tests", "goldens")

N_LAYER = 2
N_EMBD = 128
N_HEAD = 4
N_HEAD_KV = 2
N_FF = 256
N_CTX = 512
HEAD_DIM = N_EMBD // N_HEAD
W_STD = 0.05
NORM_NOISE = 0.05
BIAS_STD = 0.1

# Merges in priority order. Every part must already be a token (a byte token
# or the result of an earlier merge); the script checks this.
MERGES = [
    "Ġ t", "h e", "Ġ a", "i n", "Ġt he", "e r", "o n", "Ġ s", "r e", "a n",
    "Ġ w", "o r", "Ġ o", "e n", "Ġ c", "i s", "a t", "e s", "Ġ b", "Ġ f",
    "n d", "i t", "Ġ p", "Ġ m", "a r", "l l", "Ġa nd", "Ġ in", "Ġo f", "o u",
    "Ġ h", "e d", "Ġt o", "in g", "Ġ d", "Ġ l", "l e", "Ġ Ġ", "Ċ Ċ", "Ġ 1",
]
SPECIALS = ["<|endoftext|>", "<|im_start|>"]

MODELS = {
    # file: (arch, matrix type, token_embd type, tied output, biases,
    #        rope base, rms eps, weight seed, file_type)
    "tiny_llama.gguf": ("llama", QT.Q8_0, QT.Q8_0, False, False, 10000.0, 1e-5, 1234,
                        gguf.LlamaFileType.MOSTLY_Q8_0),
    "tiny_qwen2.gguf": ("qwen2", QT.Q4_0, QT.Q8_0, True, True, 1000000.0, 1e-6, 5678,
                        gguf.LlamaFileType.MOSTLY_Q4_0),
    "tiny_llama_f32.gguf": ("llama", QT.F32, QT.F32, False, False, 10000.0, 1e-5, 1234,
                            gguf.LlamaFileType.ALL_F32),
    "tiny_qwen3.gguf": ("qwen3", QT.Q8_0, QT.Q8_0, True, False, 1000000.0, 1e-6, 9012,
                        gguf.LlamaFileType.MOSTLY_Q8_0),
    # Llama 3's RoPE: a rope_freqs.weight of per-pair divisors (random in [1, 8], so that every
    # pair's angle moves), F32.
    "tiny_llama3_rope_f32.gguf": ("llama", QT.F32, QT.F32, False, False, 10000.0, 1e-5, 2468,
                              gguf.LlamaFileType.ALL_F32),
    # YaRN: rope.scaling.type yarn, factor 4 over an original context of 64 (context 512), F32.
    "tiny_llama_yarn_f32.gguf": ("llama", QT.F32, QT.F32, False, False, 10000.0, 1e-5, 1357,
                             gguf.LlamaFileType.ALL_F32),
    # Written as F32, then quantized by llama-quantize (QUANTIZED below).
    "tiny_llama_kq.gguf": ("llama", QT.F32, QT.F32, False, False, 500000.0, 1e-5, 4321,
                           gguf.LlamaFileType.ALL_F32),
    "tiny_llama_iq4.gguf": ("llama", QT.F32, QT.F32, False, False, 500000.0, 1e-5, 8642,
                            gguf.LlamaFileType.ALL_F32),
    "tiny_llama_q23k.gguf": ("llama", QT.F32, QT.F32, False, False, 500000.0, 1e-5, 9753,
                             gguf.LlamaFileType.ALL_F32),
}
# Per-file extras: an explicit head size (attention.key_length/value_length)
# and per-head q/k norms.
EXTRAS = {
    "tiny_qwen3.gguf": {"head_dim": 64, "qk_norm": True},
    "tiny_llama_kq.gguf": {"n_embd": 256, "n_ff": 512},
    "tiny_llama_iq4.gguf": {"n_embd": 256, "n_ff": 512},
    "tiny_llama_q23k.gguf": {"n_embd": 256, "n_ff": 512},
    "tiny_llama3_rope_f32.gguf": {"rope_freqs": True},
    "tiny_llama_yarn_f32.gguf": {"yarn": (4.0, 64)},
}

# Files quantized by llama.cpp's own llama-quantize (tools/bench/build_llamacpp.sh) from an F32
# file written as above, since the gguf package cannot quantize the k-quants: the llama.cpp
# quantization type, then per-tensor types (llama-quantize --tensor-type), so that one small
# file holds every panel type (kernels/cpu/panel.h).
QUANTIZED = {
    "tiny_llama_kq.gguf": ("Q4_K_M", {"attn_q": "q4_k", "attn_k": "q5_k", "attn_v": "q6_k", "attn_output": "q5_0",
                                      "ffn_gate": "q4_k", "ffn_up": "q5_1", "ffn_down": "q6_k"},
                           {"--token-embedding-type": "q4_k", "--output-tensor-type": "q6_k"}),
    "tiny_llama_iq4.gguf": ("IQ4_XS", {"attn_q": "iq4_xs", "attn_k": "iq4_nl", "attn_v": "iq4_xs",
                                       "attn_output": "iq4_nl", "ffn_gate": "iq4_xs", "ffn_up": "iq4_nl",
                                       "ffn_down": "iq4_xs"},
                            {"--token-embedding-type": "iq4_nl", "--output-tensor-type": "iq4_xs"}),
    "tiny_llama_q23k.gguf": ("Q3_K_M", {"attn_q": "q2_k", "attn_k": "q3_k", "attn_v": "q3_k", "attn_output": "q2_k",
                                        "ffn_gate": "q3_k", "ffn_up": "q2_k", "ffn_down": "q3_k"},
                             {"--token-embedding-type": "q2_k", "--output-tensor-type": "q3_k"}),
}


def bytes_to_unicode():
    """GPT-2's byte -> printable character table (same order as GPT-2)."""
    bs = (list(range(0x21, 0x7F)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(0x100 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def build_vocab():
    b2u = bytes_to_unicode()
    tokens = list(b2u.values())  # 256 byte tokens in GPT-2's order
    assert len(set(tokens)) == 256
    have = set(tokens)
    for m in MERGES:
        a, b = m.split(" ")
        assert a in have and b in have, "merge %r: part not in vocab" % m
        assert a + b not in have, "merge %r: duplicate result" % m
        tokens.append(a + b)
        have.add(a + b)
    types = [gguf.TokenType.NORMAL] * len(tokens)
    for s in SPECIALS:
        tokens.append(s)
        types.append(gguf.TokenType.CONTROL)
    return tokens, types


def add_matrix(w, name, ne, qtype, rng, std=W_STD):
    """Random [n_out, n_in] matrix (GGUF ne = [n_in, n_out]) stored as qtype."""
    data = rng.normal(0.0, std, size=(ne[1], ne[0])).astype(np.float32)
    if qtype == QT.F32:
        w.add_tensor(name, data)
    else:
        q = gguf.quants.quantize(data, qtype)  # uint8 [n_out, bytes per row]
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=qtype)


def add_norm(w, name, n, rng):
    w.add_tensor(name, (1.0 + rng.normal(0.0, NORM_NOISE, size=n)).astype(np.float32))


def add_bias(w, name, n, rng):
    w.add_tensor(name, rng.normal(0.0, BIAS_STD, size=n).astype(np.float32))


def add_tokenizer(w, tokens, types):
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([int(t) for t in types])
    w.add_token_merges(MERGES)
    w.add_bos_token_id(tokens.index("<|im_start|>"))
    w.add_eos_token_id(tokens.index("<|endoftext|>"))
    w.add_add_bos_token(False)


def write_model(path, spec, tokens, types):
    arch, mtype, etype, tied, biases, rope_base, eps, seed, ftype = spec
    extras = EXTRAS.get(os.path.basename(path), {})
    n_embd = extras.get("n_embd", N_EMBD)
    n_ff = extras.get("n_ff", N_FF)
    head_dim = extras.get("head_dim", n_embd // N_HEAD)
    qk_norm = extras.get("qk_norm", False)
    n_vocab = len(tokens)
    rng = np.random.default_rng(seed)
    w = gguf.GGUFWriter(path, arch)
    w.add_name(os.path.splitext(os.path.basename(path))[0])
    w.add_file_type(int(ftype))
    w.add_context_length(N_CTX)
    w.add_embedding_length(n_embd)
    w.add_block_count(N_LAYER)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(N_HEAD)
    w.add_head_count_kv(N_HEAD_KV)
    if head_dim != n_embd // N_HEAD:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    w.add_rope_dimension_count(head_dim)
    w.add_rope_freq_base(rope_base)
    if "yarn" in extras:
        factor, orig_ctx = extras["yarn"]
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(factor)
        w.add_rope_scaling_orig_ctx_len(orig_ctx)
    w.add_layer_norm_rms_eps(eps)
    w.add_vocab_size(n_vocab)

    add_tokenizer(w, tokens, types)

    # Tensor order as llama.cpp's converters write it. Weights are drawn in
    # this order from one generator, so the F32 and Q8_0 llama files share
    # the same underlying float weights.
    add_matrix(w, "token_embd.weight", [n_embd, n_vocab], etype, rng)
    kv = N_HEAD_KV * head_dim
    qd = N_HEAD * head_dim
    for i in range(N_LAYER):
        p = "blk.%d." % i
        add_norm(w, p + "attn_norm.weight", n_embd, rng)
        add_matrix(w, p + "attn_q.weight", [n_embd, qd], mtype, rng)
        add_matrix(w, p + "attn_k.weight", [n_embd, kv], mtype, rng)
        add_matrix(w, p + "attn_v.weight", [n_embd, kv], mtype, rng)
        if biases:
            add_bias(w, p + "attn_q.bias", qd, rng)
            add_bias(w, p + "attn_k.bias", kv, rng)
            add_bias(w, p + "attn_v.bias", kv, rng)
        if qk_norm:
            add_norm(w, p + "attn_q_norm.weight", head_dim, rng)
            add_norm(w, p + "attn_k_norm.weight", head_dim, rng)
        add_matrix(w, p + "attn_output.weight", [qd, n_embd], mtype, rng)
        add_norm(w, p + "ffn_norm.weight", n_embd, rng)
        add_matrix(w, p + "ffn_gate.weight", [n_embd, n_ff], mtype, rng)
        add_matrix(w, p + "ffn_up.weight", [n_embd, n_ff], mtype, rng)
        add_matrix(w, p + "ffn_down.weight", [n_ff, n_embd], mtype, rng)
    add_norm(w, "output_norm.weight", n_embd, rng)
    if not tied:
        add_matrix(w, "output.weight", [n_embd, n_vocab], mtype, rng)
    if extras.get("rope_freqs"):
        w.add_tensor("rope_freqs.weight", rng.uniform(1.0, 8.0, head_dim // 2).astype(np.float32))

    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# Gemma 3 (gemma3): 3 layers, sliding windows of 8 positions on layers 0 and 1 (pattern 3: the
# third layer global), their RoPE base 5000 (rope.freq_base_swa) against 1e6 globally, head 64
# (q_dim 256 != n_embd 128, so the q scale 1/sqrt(64) is not 1/sqrt(n_embd / n_head)), q/k norms,
# post-attention and post-FFN norms, GeGLU, a tied output and a final logit soft-cap of 3 (Gemma 2's
# key, which llama.cpp's gemma3 also reads), all F32.
GEMMA3 = dict(n_layer=3, n_head=4, n_head_kv=2, head_dim=64, n_ff=256, window=8, pattern=3,
              rope_base=1000000.0, rope_base_swa=5000.0, eps=1e-6, softcap=3.0, seed=7777)


def write_gemma3_model(path, tokens, types):
    h = GEMMA3
    n_embd, n_vocab, hd = N_EMBD, len(tokens), h["head_dim"]
    rng = np.random.default_rng(h["seed"])
    w = gguf.GGUFWriter(path, "gemma3")
    w.add_name(os.path.splitext(os.path.basename(path))[0])
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32))
    w.add_context_length(N_CTX)
    w.add_embedding_length(n_embd)
    w.add_block_count(h["n_layer"])
    w.add_feed_forward_length(h["n_ff"])
    w.add_head_count(h["n_head"])
    w.add_head_count_kv(h["n_head_kv"])
    w.add_key_length(hd)
    w.add_value_length(hd)
    w.add_rope_freq_base(h["rope_base"])
    w.add_rope_freq_base_swa(h["rope_base_swa"])
    w.add_sliding_window(h["window"])
    w.add_sliding_window_pattern(h["pattern"])
    w.add_final_logit_softcapping(h["softcap"])
    w.add_layer_norm_rms_eps(h["eps"])
    w.add_vocab_size(n_vocab)
    add_tokenizer(w, tokens, types)
    add_matrix(w, "token_embd.weight", [n_embd, n_vocab], QT.F32, rng)
    qd, kv = h["n_head"] * hd, h["n_head_kv"] * hd
    for i in range(h["n_layer"]):
        p = "blk.%d." % i
        add_norm(w, p + "attn_norm.weight", n_embd, rng)
        add_matrix(w, p + "attn_q.weight", [n_embd, qd], QT.F32, rng)
        add_matrix(w, p + "attn_k.weight", [n_embd, kv], QT.F32, rng)
        add_matrix(w, p + "attn_v.weight", [n_embd, kv], QT.F32, rng)
        add_norm(w, p + "attn_q_norm.weight", hd, rng)
        add_norm(w, p + "attn_k_norm.weight", hd, rng)
        add_matrix(w, p + "attn_output.weight", [qd, n_embd], QT.F32, rng)
        add_norm(w, p + "post_attention_norm.weight", n_embd, rng)
        add_norm(w, p + "ffn_norm.weight", n_embd, rng)
        add_matrix(w, p + "ffn_gate.weight", [n_embd, h["n_ff"]], QT.F32, rng)
        add_matrix(w, p + "ffn_up.weight", [n_embd, h["n_ff"]], QT.F32, rng)
        add_matrix(w, p + "ffn_down.weight", [h["n_ff"], n_embd], QT.F32, rng)
        add_norm(w, p + "post_ffw_norm.weight", n_embd, rng)
    add_norm(w, "output_norm.weight", n_embd, rng)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


# The hybrid model (qwen35): shapes and the layer pattern.
HYBRID = dict(n_layer=4, interval=2, n_head=4, n_head_kv=2, head_dim=32, n_rot=8,
              sections=[2, 1, 1, 0], conv_kernel=4, n_k_heads=2, n_v_heads=4, state=16,
              rope_base=10000.0, eps=1e-6, seed=3535)


def add_qwen35_header(w, h):
    """The qwen35 hyper-parameters (h: n_embd, n_ff, n_ctx, n_layer, interval, n_head,
    n_head_kv, head_dim, n_rot, sections, rope_base, eps, conv_kernel, n_k_heads, n_v_heads,
    state). Returns (key_dim, value_dim, conv_dim) of the Gated DeltaNet layers."""
    w.add_context_length(h["n_ctx"])
    w.add_embedding_length(h["n_embd"])
    w.add_block_count(h["n_layer"])
    w.add_feed_forward_length(h["n_ff"])
    w.add_head_count(h["n_head"])
    w.add_head_count_kv(h["n_head_kv"])
    w.add_key_length(h["head_dim"])
    w.add_value_length(h["head_dim"])
    w.add_rope_dimension_count(h["n_rot"])
    w.add_rope_dimension_sections(h["sections"])
    w.add_rope_freq_base(h["rope_base"])
    w.add_layer_norm_rms_eps(h["eps"])
    key_dim = h["n_k_heads"] * h["state"]
    value_dim = h["n_v_heads"] * h["state"]
    w.add_ssm_conv_kernel(h["conv_kernel"])
    w.add_ssm_inner_size(value_dim)
    w.add_ssm_state_size(h["state"])
    w.add_ssm_time_step_rank(h["n_v_heads"])
    w.add_ssm_group_count(h["n_k_heads"])
    w.add_full_attention_interval(h["interval"])
    return key_dim, value_dim, 2 * key_dim + value_dim


# The mixture-of-experts variant (qwen35moe): experts, their width, the shared expert's width.
EXPERTS = dict(n_expert=4, n_expert_used=2, n_ff_exp=64, n_ff_shexp=96, seed=3536)


def add_experts(w, p, rng, qt):
    """A qwen35moe feed-forward: F32 router, 3-d expert tensors, a gated shared expert."""
    x = EXPERTS
    w.add_tensor(p + "ffn_gate_inp.weight", rng.normal(0.0, 0.3, size=(x["n_expert"], N_EMBD)).astype(np.float32))
    for name, shape in (("ffn_gate_exps", (x["n_expert"], x["n_ff_exp"], N_EMBD)),
                        ("ffn_up_exps", (x["n_expert"], x["n_ff_exp"], N_EMBD)),
                        ("ffn_down_exps", (x["n_expert"], N_EMBD, x["n_ff_exp"]))):
        data = rng.normal(0.0, W_STD, size=shape).astype(np.float32)
        if qt == QT.F32:
            w.add_tensor(p + name + ".weight", data)
        else:
            q = gguf.quants.quantize(data, qt)
            w.add_tensor(p + name + ".weight", q, raw_shape=q.shape, raw_dtype=qt)
    w.add_tensor(p + "ffn_gate_inp_shexp.weight", rng.normal(0.0, 0.3, size=N_EMBD).astype(np.float32))
    add_matrix(w, p + "ffn_gate_shexp.weight", [N_EMBD, x["n_ff_shexp"]], qt, rng)
    add_matrix(w, p + "ffn_up_shexp.weight", [N_EMBD, x["n_ff_shexp"]], qt, rng)
    add_matrix(w, p + "ffn_down_shexp.weight", [x["n_ff_shexp"], N_EMBD], qt, rng)


def write_hybrid_model(path, tokens, types, arch="qwen35", qt=QT.Q8_0):
    """qwen35 (dense), qwen35moe (experts) or qwen3next (experts; value heads in the original
    order, key head h / r; beta and alpha packed per key head in ssm_ba). Matrices of type qt."""
    h = HYBRID
    n_vocab = len(tokens)
    moe = arch != "qwen35"
    rng = np.random.default_rng({"qwen35": h["seed"], "qwen35moe": EXPERTS["seed"], "qwen3next": 3537}[arch])
    w = gguf.GGUFWriter(path, arch)
    w.add_name(os.path.splitext(os.path.basename(path))[0])
    w.add_file_type(int(gguf.LlamaFileType.ALL_F32 if qt == QT.F32 else gguf.LlamaFileType.MOSTLY_Q8_0))
    key_dim, value_dim, conv_dim = add_qwen35_header(w, dict(h, n_embd=N_EMBD, n_ff=N_FF, n_ctx=N_CTX))
    if moe:
        w.add_expert_count(EXPERTS["n_expert"])
        w.add_expert_used_count(EXPERTS["n_expert_used"])
        w.add_expert_feed_forward_length(EXPERTS["n_ff_exp"])
        w.add_expert_shared_feed_forward_length(EXPERTS["n_ff_shexp"])
    w.add_vocab_size(n_vocab)
    add_tokenizer(w, tokens, types)

    add_matrix(w, "token_embd.weight", [N_EMBD, n_vocab], qt, rng)
    for i in range(h["n_layer"]):
        p = "blk.%d." % i
        add_norm(w, p + "attn_norm.weight", N_EMBD, rng)
        if (i + 1) % h["interval"] != 0:  # Gated DeltaNet
            add_matrix(w, p + "attn_qkv.weight", [N_EMBD, conv_dim], qt, rng)
            add_matrix(w, p + "attn_gate.weight", [N_EMBD, value_dim], qt, rng)
            if arch == "qwen3next":
                add_matrix(w, p + "ssm_ba.weight", [N_EMBD, 2 * h["n_v_heads"]], qt, rng, std=0.2)
            else:
                add_matrix(w, p + "ssm_beta.weight", [N_EMBD, h["n_v_heads"]], qt, rng, std=0.2)
                add_matrix(w, p + "ssm_alpha.weight", [N_EMBD, h["n_v_heads"]], qt, rng, std=0.2)
            w.add_tensor(p + "ssm_conv1d.weight",
                         rng.normal(0.0, 0.5, size=(conv_dim, h["conv_kernel"])).astype(np.float32))
            w.add_tensor(p + "ssm_dt.bias", rng.normal(0.0, 0.5, size=h["n_v_heads"]).astype(np.float32))
            w.add_tensor(p + "ssm_a", (-np.exp(rng.normal(0.0, 0.5, size=h["n_v_heads"]))).astype(np.float32))
            add_norm(w, p + "ssm_norm.weight", h["state"], rng)
            add_matrix(w, p + "ssm_out.weight", [value_dim, N_EMBD], qt, rng)
        else:  # gated attention
            hd = h["head_dim"]
            add_matrix(w, p + "attn_q.weight", [N_EMBD, 2 * h["n_head"] * hd], qt, rng)
            add_matrix(w, p + "attn_k.weight", [N_EMBD, h["n_head_kv"] * hd], qt, rng)
            add_matrix(w, p + "attn_v.weight", [N_EMBD, h["n_head_kv"] * hd], qt, rng)
            add_norm(w, p + "attn_q_norm.weight", hd, rng)
            add_norm(w, p + "attn_k_norm.weight", hd, rng)
            add_matrix(w, p + "attn_output.weight", [h["n_head"] * hd, N_EMBD], qt, rng)
        add_norm(w, p + "post_attention_norm.weight", N_EMBD, rng)
        if moe:
            add_experts(w, p, rng, qt)
        else:
            add_matrix(w, p + "ffn_gate.weight", [N_EMBD, N_FF], qt, rng)
            add_matrix(w, p + "ffn_up.weight", [N_EMBD, N_FF], qt, rng)
            add_matrix(w, p + "ffn_down.weight", [N_FF, N_EMBD], qt, rng)
    add_norm(w, "output_norm.weight", N_EMBD, rng)
    add_matrix(w, "output.weight", [N_EMBD, n_vocab], qt, rng)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def llama_quantize(path, spec):
    """Quantizes the F32 file at path in place with llama-quantize, as QUANTIZED[name] says."""
    import subprocess
    base, per_tensor, flags = spec
    bin_dir = subprocess.run([os.path.join(REPO, "tools", "bench", "build_llamacpp.sh")], check=True, text=True,
                             stdout=subprocess.PIPE).stdout.strip().splitlines()[-1]
    cmd = [os.path.join(bin_dir, "llama-quantize")]
    for k, v in flags.items():
        cmd += [k, v]
    for k, v in per_tensor.items():
        cmd += ["--tensor-type", "%s=%s" % (k, v)]
    src = path + ".f32"
    os.replace(path, src)
    try:
        subprocess.run(cmd + [src, path, base, "1"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    finally:
        os.remove(src)


def check_with_llama_cpp(path, n_vocab):
    import llama_cpp
    t0 = time.perf_counter()
    llm = llama_cpp.Llama(model_path=path, n_ctx=64, n_threads=2, n_threads_batch=2,
                          logits_all=True, verbose=False)
    assert llm.n_vocab() == n_vocab, (llm.n_vocab(), n_vocab)
    ids = [int(t) for t in np.random.default_rng(0).integers(0, n_vocab, size=8)]
    llm.eval(ids)
    logits = np.array(llm.scores[llm.n_tokens - 1], dtype=np.float32)
    top = np.sort(logits)[::-1]
    print("  llama.cpp: n_vocab %d, n_ctx_train %d, n_embd %d; logits std %.3f, "
          "range [%.3f, %.3f], top2 gap %.4f, load+eval %.2fs" % (
              llm.n_vocab(), llm._model.n_ctx_train(), llm.n_embd(), logits.std(), logits.min(),
              logits.max(), top[0] - top[1], time.perf_counter() - t0))
    assert np.isfinite(logits).all() and logits.std() > 0.1, "degenerate logits"
    del llm


def main():
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=DEFAULT_OUT, help="output directory")
    ap.add_argument("--no-check", action="store_true", help="skip loading with llama.cpp")
    ap.add_argument("--only", default="", help="comma-separated file names to write (default: all)")
    args = ap.parse_args()

    t_start = time.perf_counter()
    os.makedirs(args.out, exist_ok=True)
    tokens, types = build_vocab()
    print("vocab: %d tokens (%d merges, %d specials)" % (len(tokens), len(MERGES), len(SPECIALS)))
    hybrids = [("tiny_qwen35.gguf", None), ("tiny_qwen35moe.gguf", None), ("tiny_qwen3next_f32.gguf", None)]
    for name, spec in list(MODELS.items()) + hybrids + [("tiny_gemma3_f32.gguf", "gemma3")]:
        if args.only and name not in args.only.split(","):
            continue
        path = os.path.join(args.out, name)
        if spec == "gemma3":
            write_gemma3_model(path, tokens, types)
        elif spec is None:
            arch = name[len("tiny_"):-len(".gguf")].replace("_f32", "")
            write_hybrid_model(path, tokens, types, arch=arch, qt=QT.F32 if "f32" in name else QT.Q8_0)
        else:
            write_model(path, spec, tokens, types)
            if name in QUANTIZED:
                llama_quantize(path, QUANTIZED[name])
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        print("%s: %d bytes, sha256 %s" % (name, os.path.getsize(path), digest))
        if not args.no_check:
            check_with_llama_cpp(path, len(tokens))
    print("done in %.2fs" % (time.perf_counter() - t_start))


if __name__ == "__main__":
    sys.exit(main())
