#!/usr/bin/env python3
"""Write two small SentencePiece ("llama" tokenizer model) vocabularies as GGUF files.

A real SentencePiece BPE model is trained by the `sentencepiece` package on the tokenizer
corpus (tools/goldens/tokenizer_corpus.json: its valid UTF-8 entries, one sentence each), then
written the way llama.cpp's converter writes one (piece, score, type per id: UNKNOWN, CONTROL,
USER_DEFINED, UNUSED, BYTE or NORMAL):

  tiny_spm_llama2.gguf   Llama 2's layout: <unk> 0, <s> 1, </s> 2, the 256 byte tokens
                         <0x00>..<0xFF> (byte fallback), then the pieces; add_space_prefix left
                         out (llama.cpp's default for SentencePiece, true), BOS added
  tiny_spm_gemma.gguf    Gemma's layout: <pad> 0, <eos> 1, <bos> 2, <unk> 3 (Gemma's names), user-defined
                         tokens (<start_of_turn>, <end_of_turn>, tags, a tab run) that split
                         out before SentencePiece, byte fallback; add_space_prefix false, as
                         Gemma's files say

Both carry only a vocabulary (general.architecture "llama" with tiny hyper-parameters and no
tensors): llama.cpp loads them with vocab_only=True, which is all the tokenizer goldens need.
Training runs single-threaded with fixed options, so re-running gives the same files.

Usage:
  make_spm_vocabs.py [--out tests/goldens]
"""
import argparse
import json
import os
import tempfile

import gguf
import sentencepiece as spm

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))

GEMMA_USER_DEFINED = ["<start_of_turn>", "<end_of_turn>", "<h1>", "</h1>", "<b>", "</b>", "\t\t"]


def training_lines():
    with open(os.path.join(HERE, "tokenizer_corpus.json"), encoding="utf-8") as f:
        corpus = json.load(f)
    lines = []
    for e in corpus:
        if not isinstance(e, str):
            continue
        for line in e.split("\n"):
            if line.strip() and len(line.encode("utf-8")) < 2000:
                lines.append(line)
    return lines


def train(lines, prefix, **options):
    with tempfile.TemporaryDirectory() as td:
        text = os.path.join(td, "train.txt")
        with open(text, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
        spm.SentencePieceTrainer.train(
            input=text, model_prefix=os.path.join(td, prefix), model_type="bpe", byte_fallback=True,
            character_coverage=0.9995, num_threads=1, split_digits=True, allow_whitespace_only_pieces=True,
            remove_extra_whitespaces=False, normalization_rule_name="identity", minloglevel=2, **options)
        return spm.SentencePieceProcessor(model_file=os.path.join(td, prefix + ".model"))


def vocab_of(sp):
    """Pieces, scores and GGUF token types, as llama.cpp's converter reads them."""
    T = gguf.TokenType
    tokens, scores, types = [], [], []
    for i in range(sp.get_piece_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(sp.get_score(i))
        if sp.is_unknown(i):
            types.append(T.UNKNOWN)
        elif sp.is_control(i):
            types.append(T.CONTROL)
        elif sp.is_unused(i):
            types.append(T.UNUSED)
        elif sp.is_byte(i):
            types.append(T.BYTE)
        elif tokens[-1] in GEMMA_USER_DEFINED:
            types.append(T.USER_DEFINED)
        else:
            types.append(T.NORMAL)
    return tokens, scores, types


def write_vocab(path, sp, bos, eos, unk, add_space_prefix=None, pad=None):
    tokens, scores, types = vocab_of(sp)
    w = gguf.GGUFWriter(path, "llama")
    w.add_name(os.path.splitext(os.path.basename(path))[0])
    w.add_context_length(512)
    w.add_embedding_length(64)
    w.add_block_count(1)
    w.add_feed_forward_length(128)
    w.add_head_count(2)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(bos)
    w.add_eos_token_id(eos)
    w.add_unk_token_id(unk)
    if pad is not None:
        w.add_pad_token_id(pad)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return len(tokens)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(REPO, "tests", "goldens"))
    args = ap.parse_args()
    lines = training_lines()

    llama2 = train(lines, "llama2", vocab_size=1200, unk_id=0, bos_id=1, eos_id=2, pad_id=-1)
    path = os.path.join(args.out, "tiny_spm_llama2.gguf")
    n = write_vocab(path, llama2, bos=1, eos=2, unk=0)
    print("%s: %d tokens" % (path, n))

    gemma = train(lines, "gemma", vocab_size=1200, pad_id=0, eos_id=1, bos_id=2, unk_id=3,
                  add_dummy_prefix=False, user_defined_symbols=GEMMA_USER_DEFINED,
                  pad_piece="<pad>", eos_piece="<eos>", bos_piece="<bos>")
    path = os.path.join(args.out, "tiny_spm_gemma.gguf")
    n = write_vocab(path, gemma, bos=2, eos=1, unk=3, pad=0, add_space_prefix=False)
    print("%s: %d tokens" % (path, n))


if __name__ == "__main__":
    main()
