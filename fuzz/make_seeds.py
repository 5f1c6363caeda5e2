#!/usr/bin/env python3
"""Writes seed inputs for the fuzz targets: small valid files that reach deep code paths.

    fuzz/make_seeds.py gguf_fuzz DIR
"""
import os
import struct
import sys


def s(x: bytes) -> bytes:
    return struct.pack("<Q", len(x)) + x


def kv(key: str, vtype: int, payload: bytes) -> bytes:
    return s(key.encode()) + struct.pack("<I", vtype) + payload


def arr(elem: int, items: list) -> bytes:
    return struct.pack("<IQ", elem, len(items)) + b"".join(items)


def gguf(kvs: list, tensors: list, align: int = 32) -> bytes:
    head = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kvs)) + b"".join(kvs)
    infos, data = b"", b""
    for name, ttype, dims, blob in tensors:
        data += b"\0" * (-len(data) % align)
        infos += s(name.encode()) + struct.pack("<I", len(dims)) + b"".join(struct.pack("<Q", d) for d in dims)
        infos += struct.pack("<IQ", ttype, len(data))
        data += blob
    out = head + infos
    out += b"\0" * (-len(out) % align)
    return out + data


def seeds():
    tokens = [b"a", b"b", b"c", b"ab", b"bc", b"\xc4\xa0", b"<|im_start|>", b"<|im_end|>"]
    vocab = [
        kv("tokenizer.ggml.model", 8, s(b"gpt2")),
        kv("tokenizer.ggml.pre", 8, s(b"smollm")),
        kv("tokenizer.ggml.tokens", 9, arr(8, [s(t) for t in tokens])),
        kv("tokenizer.ggml.token_type", 9, arr(5, [struct.pack("<i", t) for t in [1, 1, 1, 1, 1, 1, 3, 3]])),
        kv("tokenizer.ggml.merges", 9, arr(8, [s(b"a b"), s(b"b c")])),
        kv("tokenizer.ggml.bos_token_id", 4, struct.pack("<I", 6)),
    ]
    yield "vocab.gguf", gguf(vocab, [])
    scalars = [
        kv("general.architecture", 8, s(b"llama")),
        kv("u8", 0, b"\x07"), kv("i16", 3, struct.pack("<h", -3)), kv("f32", 6, struct.pack("<f", 0.5)),
        kv("b", 7, b"\x01"), kv("u64", 10, struct.pack("<Q", 9)), kv("f64", 12, struct.pack("<d", 1.25)),
        kv("general.alignment", 4, struct.pack("<I", 64)),
    ]
    tensors = [
        ("f32", 0, [4, 2], b"\0" * 32),
        ("q4_0", 2, [32], b"\x01" * 18),
        ("q4_k", 12, [256], b"\x02" * 144),
        ("q6_k", 14, [256, 1], b"\x03" * 210),
    ]
    yield "tensors.gguf", gguf(scalars, tensors, align=64)
    yield "both.gguf", gguf(vocab + scalars[:1], tensors[:2])
    # A 2-layer qwen35 hybrid (layer 0 Gated DeltaNet, layer 1 gated attention), all F32 zeros:
    # reaches the model config and weight loaders.
    u32 = lambda k, v: kv("qwen35." + k, 4, struct.pack("<I", v))
    hybrid = vocab + [
        kv("general.architecture", 8, s(b"qwen35")),
        u32("embedding_length", 32), u32("block_count", 2), u32("attention.head_count", 2),
        u32("attention.head_count_kv", 1), u32("feed_forward_length", 32), u32("context_length", 64),
        u32("attention.key_length", 16), u32("attention.value_length", 16), u32("rope.dimension_count", 8),
        kv("qwen35.rope.dimension_sections", 9, arr(5, [struct.pack("<i", x) for x in [2, 1, 1, 0]])),
        u32("ssm.conv_kernel", 4), u32("ssm.state_size", 16), u32("ssm.group_count", 1),
        u32("ssm.time_step_rank", 2), u32("ssm.inner_size", 32), u32("full_attention_interval", 2),
        kv("qwen35.attention.layer_norm_rms_epsilon", 6, struct.pack("<f", 1e-6)),
    ]
    def f32(name, *dims):
        n = 1
        for d in dims:
            n *= d
        return (name, 0, list(dims), b"\0" * (4 * n))
    ts = [f32("token_embd.weight", 32, 8), f32("output_norm.weight", 32)]
    for i in range(2):
        p = "blk.%d." % i
        ts += [f32(p + "attn_norm.weight", 32), f32(p + "post_attention_norm.weight", 32),
               f32(p + "ffn_gate.weight", 32, 32), f32(p + "ffn_up.weight", 32, 32), f32(p + "ffn_down.weight", 32, 32)]
        if i == 0:
            ts += [f32(p + "attn_qkv.weight", 32, 64), f32(p + "attn_gate.weight", 32, 32),
                   f32(p + "ssm_beta.weight", 32, 2), f32(p + "ssm_alpha.weight", 32, 2), f32(p + "ssm_conv1d.weight", 4, 64),
                   f32(p + "ssm_dt.bias", 2), f32(p + "ssm_a", 2), f32(p + "ssm_norm.weight", 16),
                   f32(p + "ssm_out.weight", 32, 32)]
        else:
            ts += [f32(p + "attn_q.weight", 32, 64), f32(p + "attn_k.weight", 32, 16), f32(p + "attn_v.weight", 32, 16),
                   f32(p + "attn_q_norm.weight", 16), f32(p + "attn_k_norm.weight", 16),
                   f32(p + "attn_output.weight", 32, 32)]
    yield "qwen35.gguf", gguf(hybrid, ts)


def main():
    target, out = sys.argv[1], sys.argv[2]
    os.makedirs(out, exist_ok=True)
    if target != "gguf_fuzz":
        sys.exit(f"no seeds known for {target}")
    for name, blob in seeds():
        with open(os.path.join(out, name), "wb") as f:
            f.write(blob)


if __name__ == "__main__":
    main()
