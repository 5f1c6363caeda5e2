#!/usr/bin/env python3
"""Record tokenizer goldens from llama.cpp (via llama-cpp-python).

For every entry of tools/goldens/tokenizer_corpus.json this records, using the
model's vocabulary loaded with vocab_only=True:

  ids             llm.tokenize(b, add_bos=False, special=False)
  ids_special     llm.tokenize(b, add_bos=False, special=True)
  ids_add_special llm.tokenize(b, add_bos=True,  special=True)

into tests/goldens/tokenizer_<name>.json.  The first output uses the model's own
pre-tokenizer (tokenizer.ggml.pre, "smollm" for SmolLM2).  Then, for each extra
pre-tokenizer (default: qwen2, llama3, gpt2), a temporary copy of the GGUF is
written whose tokenizer.ggml.pre string is replaced (every other byte of the
metadata and all tensor data are kept identical) and the same lists are
recorded with that copy.

With --name NAME the file is recorded as it is, as tokenizer_NAME.json, with no pre-tokenizer
variants: for SentencePiece vocabularies (tokenizer model "llama"), which llama.cpp gives no
pre-tokenizer, and may have no tokenizer.ggml.pre at all.

Usage:
  make_tokenizer_goldens.py [MODEL] [--out DIR] [--corpus PATH] [--pre a,b,c] [--name NAME]
"""
import argparse
import json
import os
import struct
import sys
import tempfile
import time

from golden_common import sha256_file

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CHORUS_HOME = os.environ.get("CHORUS_HOME", os.path.expanduser("~/.cache/chorus"))
DEFAULT_MODEL = os.path.join(CHORUS_HOME, "models", "SmolLM2-135M-Instruct.Q4_1.gguf")

# Output name -> list of tokenizer.ggml.pre spellings to try, in order.  The
# first one the bundled llama.cpp accepts is used and written as "pre".
PRE_ALIASES = {
    "qwen2": ["qwen2"],
    "llama3": ["llama3", "llama-bpe"],
    "gpt2": ["gpt2", "gpt-2"],
}

PRE_KEY = "tokenizer.ggml.pre"
TAG = "@@golden "  # prefix of the worker's protocol lines on stdout


def load_corpus(path):
    with open(path, "r", encoding="utf-8") as f:
        raw = json.load(f)
    out = []
    for e in raw:
        if isinstance(e, str):
            out.append(e.encode("utf-8"))
        elif isinstance(e, dict) and "hex" in e:
            out.append(bytes.fromhex(e["hex"]))
        else:
            raise ValueError("bad corpus entry: %r" % (e,))
    return out


def gguf_string_kv(key, value):
    """Serialize one GGUF key/value pair of type STRING (little endian)."""
    import gguf
    k = key.encode("utf-8")
    v = value.encode("utf-8")
    return (struct.pack("<Q", len(k)) + k
            + struct.pack("<I", int(gguf.GGUFValueType.STRING))
            + struct.pack("<Q", len(v)) + v)


def field_end(field):
    return field.offset + sum(int(p.nbytes) for p in field.parts)


def write_pre_variant(src, dst, new_pre):
    """Copy GGUF `src` to `dst`, replacing the tokenizer.ggml.pre string.

    GGUFReader supplies the byte offsets; the file is spliced: header and all
    other key/values verbatim, the one key/value re-serialized, tensor infos
    verbatim (their data offsets are relative to the data section), new
    alignment padding, then the tensor data section verbatim.
    """
    import gguf
    r = gguf.GGUFReader(src)
    if r.byte_order != "I":
        raise RuntimeError("only native-endian GGUF files are supported")
    f = r.fields.get(PRE_KEY)
    if f is None:
        raise RuntimeError("%s has no %s key" % (src, PRE_KEY))
    if not r.tensors:
        raise RuntimeError("no tensors in %s" % src)
    kv_start, kv_end = f.offset, field_end(f)
    ti_end = max(field_end(t.field) for t in r.tensors)
    data_off = r.data_offset
    align = int(r.alignment)
    del r  # drop the memmap before copying

    with open(src, "rb") as fi, open(dst, "wb") as fo:
        head = fi.read(ti_end)
        new_head = head[:kv_start] + gguf_string_kv(PRE_KEY, new_pre) + head[kv_end:]
        fo.write(new_head)
        fo.write(b"\x00" * ((-len(new_head)) % align))
        fi.seek(data_off)
        while True:
            chunk = fi.read(1 << 22)
            if not chunk:
                break
            fo.write(chunk)

    # Verify: same keys/values except the pre string, same tensor bytes.
    a, b = gguf.GGUFReader(src), gguf.GGUFReader(dst)
    assert list(a.fields) == list(b.fields)
    for name in a.fields:
        fa, fb = a.fields[name], b.fields[name]
        if name == PRE_KEY:
            got = bytes(fb.parts[fb.data[0]]).decode("utf-8")
            assert got == new_pre, got
            continue
        assert fa.types == fb.types, name
        assert len(fa.parts) == len(fb.parts), name
        for pa, pb in zip(fa.parts, fb.parts):
            assert pa.tobytes() == pb.tobytes(), name
    assert len(a.tensors) == len(b.tensors)
    for ta, tb in zip(a.tensors, b.tensors):
        assert ta.name == tb.name and ta.tensor_type == tb.tensor_type
        assert list(ta.shape) == list(tb.shape)
        assert ta.data.tobytes() == tb.data.tobytes(), ta.name


def _worker(model_path, corpus_path, start):
    """Child process: tokenize corpus[start:], one JSON line per case.

    llama.cpp can abort the whole process on some inputs (an uncaught C++
    exception), so tokenization runs in a child; the parent restarts it after
    the offending case.
    """
    import llama_cpp
    corpus = load_corpus(corpus_path)
    llm = llama_cpp.Llama(model_path=model_path, vocab_only=True, verbose=False)
    w = sys.stdout
    w.write(TAG + json.dumps({"info": {"bos_id": llm.token_bos(), "eos_id": llm.token_eos(),
                                 "n_vocab": llm.n_vocab()}}) + "\n")
    for i in range(start, len(corpus)):
        b = corpus[i]
        w.write(TAG + json.dumps({"begin": i}) + "\n")
        w.flush()
        w.write(TAG + json.dumps({"i": i, "case": {
            "hex": b.hex(),
            "ids": llm.tokenize(b, add_bos=False, special=False),
            "ids_special": llm.tokenize(b, add_bos=False, special=True),
            "ids_add_special": llm.tokenize(b, add_bos=True, special=True),
        }}) + "\n")
    w.write(TAG + json.dumps({"end": True}) + "\n")
    w.flush()


def tokenize_all(model_path, corpus_path, corpus):
    """Returns (cases, info).  Raises RuntimeError if the model won't load."""
    import subprocess
    cases, info, start = [], None, 0
    while start < len(corpus):
        p = subprocess.run([sys.executable, os.path.abspath(__file__), "--_worker",
                            model_path, corpus_path, str(start)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        current, ended = None, False
        for line in p.stdout.decode("utf-8", "replace").splitlines():
            if not line.startswith(TAG):
                continue  # e.g. a crash handler's backtrace
            msg = json.loads(line[len(TAG):])
            if "info" in msg:
                info = msg["info"]
            elif "begin" in msg:
                current = msg["begin"]
            elif "case" in msg:
                assert msg["i"] == len(cases)
                cases.append(msg["case"])
                current = None
            elif "end" in msg:
                ended = True
        err = p.stderr.decode("utf-8", "replace")
        if ended and p.returncode == 0:
            break
        if info is None or current is None:
            last = (err.strip().splitlines() or ["no message"])[-1]
            raise RuntimeError("llama.cpp failed to load %s (rc=%d): %s"
                               % (os.path.basename(model_path), p.returncode, last))
        # the child died while tokenizing corpus[current]
        what = [l.strip() for l in err.splitlines() if "what()" in l or "terminate" in l]
        cases.append({"hex": corpus[current].hex(),
                      "error": "llama.cpp aborted the process (rc=%d): %s"
                               % (p.returncode, " ".join(what) or "no message")})
        start = current + 1
    return cases, info


def write_golden(path, header, cases):
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("{\n")
        for k, v in header.items():
            f.write("%s: %s,\n" % (json.dumps(k), json.dumps(v)))
        f.write('"cases": [\n')
        for i, c in enumerate(cases):
            f.write(json.dumps(c, separators=(",", ":")))
            f.write(",\n" if i + 1 < len(cases) else "\n")
        f.write("]\n}\n")


def main():
    ap = argparse.ArgumentParser(description="Record llama.cpp tokenizer goldens.")
    ap.add_argument("model", nargs="?", default=DEFAULT_MODEL,
                    help="GGUF model (default: %(default)s)")
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "goldens"),
                    help="output directory (default: %(default)s)")
    ap.add_argument("--corpus", default=os.path.join(HERE, "tokenizer_corpus.json"))
    ap.add_argument("--pre", default=",".join(PRE_ALIASES),
                    help="extra pre-tokenizers to exercise, comma separated "
                         "('' for none; default: %(default)s)")
    ap.add_argument("--tmpdir", default=None, help="where to put modified GGUF copies")
    ap.add_argument("--name", default=None,
                    help="output name (tokenizer_NAME.json) instead of the file's pre-tokenizer; "
                         "required for a vocabulary without tokenizer.ggml.pre")
    args = ap.parse_args()

    import gguf
    import llama_cpp
    from importlib.metadata import version as pkg_version

    t_all = time.time()
    if not os.path.isfile(args.model):
        sys.exit("model not found: %s" % args.model)
    os.makedirs(args.out, exist_ok=True)
    args.corpus = os.path.abspath(args.corpus)
    args.model = os.path.abspath(args.model)
    corpus = load_corpus(args.corpus)
    model_sha = sha256_file(args.model)
    reader = gguf.GGUFReader(args.model)
    pf = reader.fields.get(PRE_KEY)
    native_pre = bytes(pf.parts[pf.data[0]]).decode("utf-8") if pf is not None else None
    del reader
    if native_pre is None and not args.name:
        sys.exit("%s has no %s: give the output a --name" % (args.model, PRE_KEY))
    if args.name:
        args.pre = ""  # a named vocabulary is recorded as it is, with no pre-tokenizer variants

    base_header = {
        "generator": "llama-cpp-python %s" % llama_cpp.__version__,
        "gguf_python": pkg_version("gguf"),
        "model": os.path.basename(args.model),
        "model_sha256": model_sha,
    }

    summary = []
    t0 = time.time()
    cases, info = tokenize_all(args.model, args.corpus, corpus)
    name = args.name or native_pre
    out = os.path.join(args.out, "tokenizer_%s.json" % name)
    write_golden(out, dict(base_header, pre=native_pre, **info), cases)
    summary.append((name, native_pre, out, cases, time.time() - t0))

    rejected = []
    extra = [p for p in args.pre.split(",") if p]
    with tempfile.TemporaryDirectory(dir=args.tmpdir) as td:
        for name in extra:
            t0 = time.time()
            done = False
            for pre in PRE_ALIASES.get(name, [name]):
                tmp = os.path.join(td, "pre-%s.gguf" % pre)
                write_pre_variant(args.model, tmp, pre)
                try:
                    cases, info = tokenize_all(tmp, args.corpus, corpus)
                except Exception as e:  # llama.cpp refused the pre name
                    rejected.append((pre, "%s: %s" % (type(e).__name__, e)))
                    os.remove(tmp)
                    continue
                os.remove(tmp)
                out = os.path.join(args.out, "tokenizer_%s.json" % name)
                hdr = dict(base_header, pre=pre, pre_note=(
                    "same vocabulary/merges as %s with %s replaced by %r"
                    % (os.path.basename(args.model), PRE_KEY, pre)), **info)
                write_golden(out, hdr, cases)
                summary.append((name, pre, out, cases, time.time() - t0))
                done = True
                break
            if not done:
                print("WARNING: no accepted spelling for pre-tokenizer %r" % name)

    print("llama-cpp-python %s, gguf %s, model %s (sha256 %s)"
          % (llama_cpp.__version__, pkg_version("gguf"), args.model, model_sha))
    for name, pre, out, cases, dt in summary:
        bad = [c["hex"] for c in cases if "error" in c]
        print("  %-8s pre=%-10s %4d cases  %6.2fs  -> %s" % (name, pre or "-", len(cases), dt, out))
        if bad:
            print("           llama.cpp aborted on %d case(s), recorded with \"error\": %s"
                  % (len(bad), ", ".join(h[:40] for h in bad)))
    for pre, err in rejected:
        print("  rejected pre name %r: %s" % (pre, err))
    print("total %.2fs" % (time.time() - t_all))


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--_worker":
        _worker(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    else:
        main()
