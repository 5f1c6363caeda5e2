#!/usr/bin/env python3
"""Record dequantization goldens using the `gguf` Python package.

For each GGML type (F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K,
Q2_K, Q3_K, IQ4_NL, IQ4_XS; the last four appended, so the earlier cases keep their bytes)
random raw block bytes are generated with a fixed seed; the f16 scale fields
are overwritten with finite, moderate values so that no NaN/Inf can appear.
The bytes are dequantized with gguf.quants.dequantize() (numpy, float32) and
written as:

  {"generator": "gguf <version> (python)", "seed": ..., "cases": [
     {"type": "Q4_0", "type_id": 2, "block_elems": 32, "block_bytes": 18,
      "n_elements": 256, "hex": "<raw bytes>", "values": [float32 values]}, ...]}

Values are Python reprs of the float32 results (shortest decimal that round
trips through double, hence also through float32).

Before writing, the gguf results are cross-checked bit-for-bit against a small
independent scalar decoder in this file (all types), so a layout mistake on
either side is caught.

Usage: make_dequant_goldens.py [--out tests/goldens/dequant.json] [--seed N]
"""
import argparse
import json
import os
import struct
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

# name -> (block_elems, block_bytes, number of blocks / values to generate)
TYPES = [
    ("F16", 1, 2, 64),
    ("BF16", 1, 2, 64),
    ("Q8_0", 32, 34, 8),
    ("Q4_0", 32, 18, 8),
    ("Q4_1", 32, 20, 8),
    ("Q5_0", 32, 22, 8),
    ("Q5_1", 32, 24, 8),
    ("Q4_K", 256, 144, 4),
    ("Q5_K", 256, 176, 4),
    ("Q6_K", 256, 210, 4),
    ("Q2_K", 256, 84, 4),
    ("Q3_K", 256, 110, 4),
    ("IQ4_NL", 32, 18, 8),
    ("IQ4_XS", 256, 136, 4),
]

# byte offsets of f16 scale fields inside a block: (offset, low, high)
SCALES = {
    "Q8_0": [(0, -2.0, 2.0)],
    "Q4_0": [(0, -2.0, 2.0)],
    "Q5_0": [(0, -2.0, 2.0)],
    "Q4_1": [(0, -2.0, 2.0), (2, -2.0, 2.0)],
    "Q5_1": [(0, -2.0, 2.0), (2, -2.0, 2.0)],
    "Q4_K": [(0, 0.0, 1.0), (2, 0.0, 1.0)],
    "Q5_K": [(0, 0.0, 1.0), (2, 0.0, 1.0)],
    "Q6_K": [(208, 0.0, 1.0)],
    "Q2_K": [(80, 0.0, 1.0), (82, 0.0, 1.0)],
    "Q3_K": [(108, 0.0, 1.0)],
    "IQ4_NL": [(0, -2.0, 2.0)],
    "IQ4_XS": [(0, 0.0, 1.0)],
}
IQ4 = [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113]

# offset/length of the quant payload of 32-element types, used to force
# one all-0x00 and one all-0xFF block (min / max quant values).
PAYLOAD_32 = {"Q8_0": (2, 32), "Q4_0": (2, 16), "Q4_1": (4, 16),
              "Q5_0": (2, 20), "Q5_1": (4, 20)}

F16_SPECIAL = [0x0000, 0x8000, 0x3C00, 0xBC00, 0x7BFF, 0xFBFF, 0x0001, 0x8001,
               0x03FF, 0x0400, 0x3555, 0xC900]
BF16_SPECIAL = [0x0000, 0x8000, 0x3F80, 0xBF80, 0x7F7F, 0xFF7F, 0x0001, 0x8001,
                0x007F, 0x0080, 0x3EAB, 0x4049]


def gen_float16_bits(rng, n, special, exp_mask, moderate_dtype):
    """n uint16 words: specials, then half random finite bit patterns, then
    moderate values (normal(0, 3) rounded to the format)."""
    out = list(special)
    n_rand = (n - len(out)) // 2
    while len(out) < len(special) + n_rand:
        w = int(rng.integers(0, 1 << 16))
        if (w & exp_mask) != exp_mask:  # reject Inf/NaN
            out.append(w)
    while len(out) < n:
        v = rng.normal(0.0, 3.0)
        if moderate_dtype == "f16":
            w = int(np.array([v], dtype=np.float16).view(np.uint16)[0])
        else:  # bf16: round-to-nearest-even from float32
            u = int(np.array([v], dtype=np.float32).view(np.uint32)[0])
            u += 0x7FFF + ((u >> 16) & 1)
            w = (u >> 16) & 0xFFFF
        out.append(w)
    return np.array(out, dtype="<u2").view(np.uint8)


def gen_blocks(rng, name, block_bytes, n_blocks):
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    if name in PAYLOAD_32:
        off, ln = PAYLOAD_32[name]
        raw[n_blocks - 2, off:off + ln] = 0x00
        raw[n_blocks - 1, off:off + ln] = 0xFF
    for off, lo, hi in SCALES[name]:
        vals = rng.uniform(lo, hi, size=n_blocks).astype(np.float16)
        raw[:, off:off + 2] = vals.view(np.uint8).reshape(n_blocks, 2)
    return raw.reshape(-1)


# ---------------------------------------------------------------------------
# Independent scalar reference decoders (float32 arithmetic, ggml op order).

F32 = np.float32


def _h(b, off):
    return F32(np.frombuffer(bytes(b[off:off + 2]), dtype="<f2")[0])


def ref_block(name, b):
    """Decode one block; b is a bytes object (indexing yields Python ints)."""
    if name == "F16":
        return [_h(b, 0)]
    if name == "BF16":
        u = struct.unpack("<H", bytes(b))[0] << 16
        return [F32(np.array([u], dtype=np.uint32).view(np.float32)[0])]
    if name == "Q8_0":
        d = _h(b, 0)
        return [d * F32(struct.unpack("b", bytes([b[2 + j]]))[0]) for j in range(32)]
    if name in ("Q4_0", "Q4_1"):
        d = _h(b, 0)
        q = b[2:18] if name == "Q4_0" else b[4:20]
        if name == "Q4_0":
            lo = [F32((q[j] & 15) - 8) * d for j in range(16)]
            hi = [F32((q[j] >> 4) - 8) * d for j in range(16)]
        else:
            m = _h(b, 2)
            lo = [F32(q[j] & 15) * d + m for j in range(16)]
            hi = [F32(q[j] >> 4) * d + m for j in range(16)]
        return lo + hi
    if name in ("Q5_0", "Q5_1"):
        d = _h(b, 0)
        base = 2 if name == "Q5_0" else 4
        qh = struct.unpack("<I", bytes(b[base:base + 4]))[0]
        qs = b[base + 4:base + 20]
        lo, hi = [], []
        for j in range(16):
            x0 = (qs[j] & 15) | (((qh >> j) << 4) & 0x10)
            x1 = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)
            if name == "Q5_0":
                lo.append(F32(x0 - 16) * d)
                hi.append(F32(x1 - 16) * d)
            else:
                m = _h(b, 2)
                lo.append(F32(x0) * d + m)
                hi.append(F32(x1) * d + m)
        return lo + hi
    if name in ("Q4_K", "Q5_K"):
        d, dmin = _h(b, 0), _h(b, 2)
        sc = b[4:16]

        def scale_min(j):
            if j < 4:
                return sc[j] & 63, sc[j + 4] & 63
            return ((sc[j + 4] & 0xF) | ((sc[j - 4] >> 6) << 4),
                    (sc[j + 4] >> 4) | ((sc[j] >> 6) << 4))
        if name == "Q4_K":
            qs, qh = b[16:144], None
        else:
            qh, qs = b[16:48], b[48:176]
        out = []
        for k in range(4):  # 64 values per step
            s1, m1 = scale_min(2 * k)
            s2, m2 = scale_min(2 * k + 1)
            d1, mm1 = d * F32(s1), dmin * F32(m1)
            d2, mm2 = d * F32(s2), dmin * F32(m2)
            q = qs[32 * k:32 * k + 32]
            for l in range(32):
                v = q[l] & 15
                if qh is not None and (qh[l] >> (2 * k)) & 1:
                    v += 16
                out.append(d1 * F32(v) - mm1)
            for l in range(32):
                v = q[l] >> 4
                if qh is not None and (qh[l] >> (2 * k + 1)) & 1:
                    v += 16
                out.append(d2 * F32(v) - mm2)
        return out
    if name == "Q6_K":
        ql, qh = b[0:128], b[128:192]
        sc = [struct.unpack("b", bytes([x]))[0] for x in b[192:208]]
        d = _h(b, 208)
        out = [None] * 256
        for n in range(2):
            L, H, S, Y = ql[64 * n:], qh[32 * n:], sc[8 * n:], 128 * n
            for l in range(32):
                i = l // 16
                q1 = ((L[l] & 15) | (((H[l] >> 0) & 3) << 4)) - 32
                q2 = ((L[l + 32] & 15) | (((H[l] >> 2) & 3) << 4)) - 32
                q3 = ((L[l] >> 4) | (((H[l] >> 4) & 3) << 4)) - 32
                q4 = ((L[l + 32] >> 4) | (((H[l] >> 6) & 3) << 4)) - 32
                out[Y + l] = d * F32(S[i]) * F32(q1)
                out[Y + l + 32] = d * F32(S[i + 2]) * F32(q2)
                out[Y + l + 64] = d * F32(S[i + 4]) * F32(q3)
                out[Y + l + 96] = d * F32(S[i + 6]) * F32(q4)
        return out
    if name == "Q2_K":
        sc, qs, d, dmin = b[0:16], b[16:80], _h(b, 80), _h(b, 82)
        out = []
        for half in range(2):
            q = qs[32 * half:32 * half + 32]
            for shift in (0, 2, 4, 6):
                for part in range(2):
                    s_ = sc[8 * half + shift + part]
                    dl, ml = d * F32(s_ & 15), dmin * F32(s_ >> 4)
                    out += [dl * F32((q[16 * part + l] >> shift) & 3) - ml for l in range(16)]
        return out
    if name == "Q3_K":
        hm, qs, sb, d = b[0:32], b[32:96], b[96:108], _h(b, 108)
        scales = []
        for j in range(16):
            low = sb[j] & 15 if j < 8 else sb[j - 8] >> 4
            high = (sb[8 + j % 4] >> (2 * (j // 4))) & 3
            scales.append((low | high << 4) - 32)
        out, m = [], 1
        for half in range(2):
            q = qs[32 * half:32 * half + 32]
            for shift in (0, 2, 4, 6):
                for part in range(2):
                    dl = d * F32(scales[8 * half + shift + part])
                    for l in range(16):
                        k = 16 * part + l
                        out.append(dl * F32(((q[k] >> shift) & 3) - (0 if hm[k] & m else 4)))
                m <<= 1
        return out
    if name == "IQ4_NL":
        d = _h(b, 0)
        return [d * F32(IQ4[b[2 + j] & 15]) for j in range(16)] + [d * F32(IQ4[b[2 + j] >> 4]) for j in range(16)]
    if name == "IQ4_XS":
        d = _h(b, 0)
        sh = struct.unpack("<H", bytes(b[2:4]))[0]
        out = []
        for g in range(8):
            ls = ((b[4 + g // 2] >> (4 * (g % 2))) & 15) | (((sh >> (2 * g)) & 3) << 4)
            dl = d * F32(ls - 32)
            q = b[8 + 16 * g:24 + 16 * g]
            out += [dl * F32(IQ4[q[j] & 15]) for j in range(16)] + [dl * F32(IQ4[q[j] >> 4]) for j in range(16)]
        return out
    raise ValueError(name)


def ref_dequant(name, raw, block_bytes):
    out = []
    for i in range(0, len(raw), block_bytes):
        out.extend(ref_block(name, raw[i:i + block_bytes].tobytes()))
    return np.array(out, dtype=np.float32)


def main():
    ap = argparse.ArgumentParser(description="Record gguf-python dequantization goldens.")
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "goldens", "dequant.json"))
    ap.add_argument("--seed", type=int, default=20240531)
    args = ap.parse_args()

    t0 = time.time()
    import gguf
    from gguf.quants import dequantize
    from importlib.metadata import version as pkg_version
    QT = gguf.GGMLQuantizationType

    rng = np.random.default_rng(args.seed)
    cases = []
    for name, be, bb, n in TYPES:
        qt = QT[name]
        assert gguf.GGML_QUANT_SIZES[qt] == (be, bb), (name, gguf.GGML_QUANT_SIZES[qt])
        if name == "F16":
            raw = gen_float16_bits(rng, n, F16_SPECIAL, 0x7C00, "f16")
        elif name == "BF16":
            raw = gen_float16_bits(rng, n, BF16_SPECIAL, 0x7F80, "bf16")
        else:
            raw = gen_blocks(rng, name, bb, n)
        vals = np.asarray(dequantize(raw, qt), dtype=np.float32).reshape(-1)
        n_el = len(raw) // bb * be
        assert vals.shape == (n_el,), (name, vals.shape)
        assert np.all(np.isfinite(vals)), name
        ref = ref_dequant(name, raw, bb)
        bad = np.nonzero(ref.view(np.uint32) != vals.view(np.uint32))[0]
        if len(bad):
            i = int(bad[0])
            raise SystemExit("%s: gguf and reference decoder differ at %d of %d "
                             "(first at %d: %r vs %r)"
                             % (name, len(bad), n_el, i, float(vals[i]), float(ref[i])))
        cases.append({
            "type": name, "type_id": int(qt), "block_elems": be, "block_bytes": bb,
            "n_elements": n_el, "hex": raw.tobytes().hex(),
            "values": [float(v) for v in vals],
        })

    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w", encoding="utf-8", newline="\n") as f:
        f.write("{\n")
        f.write('"generator": %s,\n' % json.dumps("gguf %s (python)" % pkg_version("gguf")))
        f.write('"numpy": %s,\n' % json.dumps(np.__version__))
        f.write('"seed": %d,\n' % args.seed)
        f.write('"cases": [\n')
        for i, c in enumerate(cases):
            f.write(json.dumps(c, separators=(",", ":")))
            f.write(",\n" if i + 1 < len(cases) else "\n")
        f.write("]\n}\n")
    print("gguf %s, numpy %s -> %s" % (pkg_version("gguf"), np.__version__, args.out))
    for c in cases:
        v = np.array(c["values"], dtype=np.float32)
        print("  %-5s id=%-2d %4d elems  %5d bytes  range [%.4g, %.4g]  (matches reference decoder)"
              % (c["type"], c["type_id"], c["n_elements"], len(c["hex"]) // 2, v.min(), v.max()))
    print("total %.2fs" % (time.time() - t0))


if __name__ == "__main__":
    main()
