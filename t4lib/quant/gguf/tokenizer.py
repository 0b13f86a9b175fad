"""The tokenizer a GGUF file carries (``tokenizer.ggml.*``), read back as a Hugging Face fast tokenizer, and the
ids that end a sequence.

A byte-level BPE (``tokenizer.ggml.model`` ``"gpt2"``, what llama.cpp's converter writes for Qwen models) is
rebuilt with the ``tokenizers`` library from the file's token list, token types and merges: the pre-tokenizer
regex that ``tokenizer.ggml.pre`` names (``qwen2``: Qwen2/2.5's, also the project's tokenizer; ``qwen35``:
Qwen3.5's, which keeps combining marks with letters), NFC normalization, and control/user-defined tokens as
added tokens at their ids. Padding entries of type UNUSED (a converter pads the list to the embedding rows)
get no id. The special ids and the chat template (``tokenizer.chat_template``) travel too.

:func:`open_checked` opens a file given by a user (a notebook's ``GGUF_PATH``), naming the argument in every
error before any weight is read; :func:`with_tokenizer` copies a GGUF file with a tokenizer written into it
(the project's qwen35 copy model ships its tokenizer beside the file, not inside it).
"""
from __future__ import annotations

import os
import shutil
from pathlib import Path

from t4lib.quant.gguf import GGUFError, GGUFFile, _gguf
from t4lib.quant.gguf.export import _add_tokenizer

__all__ = ["PRE_REGEX", "EOG_TEXTS", "open_checked", "read_tokenizer", "eos_ids", "with_tokenizer"]

#: ``tokenizer.ggml.pre`` -> the pre-tokenizer's split regex
PRE_REGEX = {
    "qwen2": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+"
             r"|\s+(?!\S)|\s+",
    "qwen35": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+|\p{N}| ?[^\s\p{L}\p{M}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+",
}
#: control tokens that end a turn or a document in the chat formats these files use (llama.cpp also stops
#: at them): with the file's eos/eot/eom ids they make the EOS list (Qwen: ``<|im_end|>``, ``<|endoftext|>``)
EOG_TEXTS = ("<|im_end|>", "<|endoftext|>", "<|eot_id|>", "<|end|>")
_EOS_KEYS = ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id", "tokenizer.ggml.eom_token_id")


def open_checked(path, name: str = "path", architecture: str | None = None) -> GGUFFile:
    """``path`` opened as a GGUF file, or an error naming ``name`` (the caller's argument): TypeError for what
    is not a path, FileNotFoundError for a missing file or a directory, GGUFError for a file that is not GGUF
    (or truncated), or whose ``general.architecture`` is not ``architecture`` (when given). Reads the header and
    metadata only (tensor data stays memory-mapped)."""
    if isinstance(path, GGUFFile):
        f = path
    else:
        if isinstance(path, bool) or not isinstance(path, (str, os.PathLike)) or not str(path).strip():
            raise TypeError(f"{name} must be the path of a GGUF file (a str or Path), got {path!r}")
        p = Path(path).expanduser()
        if p.is_dir():
            raise FileNotFoundError(f"{name}={str(path)!r} is a directory, not a GGUF file")
        if not p.is_file():
            raise FileNotFoundError(f"{name}={str(path)!r}: no such file")
        try:
            f = GGUFFile(p)
        except GGUFError as e:
            raise GGUFError(f"{name}={str(path)!r}: {e}") from None
    if architecture is not None and f.architecture != architecture:
        raise GGUFError(f"{name}={str(f.path)!r}: architecture {f.architecture!r}, expected {architecture!r}")
    return f


def _meta(f: GGUFFile, key: str):
    v = f.metadata.get(key)
    return None if v is None else v


def read_tokenizer(path_or_file, name: str = "path"):
    """A ``transformers.PreTrainedTokenizerFast`` rebuilt from the file's ``tokenizer.ggml.*`` (see the module
    docstring). GGUFError naming ``name`` when the file carries no tokenizer or one of another kind."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers  # optional (train extra)
    from transformers import PreTrainedTokenizerFast  # optional (train extra)

    f = open_checked(path_or_file, name)
    where = f"{name}={str(f.path)!r}"
    kind = _meta(f, "tokenizer.ggml.model")
    if kind is None:
        raise GGUFError(f"{where}: the file carries no tokenizer (no tokenizer.ggml.model); export it with one "
                        "(t4lib.quant.gguf.tokenizer.with_tokenizer, or llama.cpp's converter)")
    if kind != "gpt2":
        raise GGUFError(f"{where}: tokenizer.ggml.model {kind!r}: only byte-level BPE ('gpt2') is read")
    pre = _meta(f, "tokenizer.ggml.pre") or "qwen2"
    if pre not in PRE_REGEX:
        raise GGUFError(f"{where}: tokenizer.ggml.pre {pre!r} is not supported (supported: {sorted(PRE_REGEX)})")
    tokens = _meta(f, "tokenizer.ggml.tokens")
    merges = _meta(f, "tokenizer.ggml.merges")
    if not tokens or merges is None:
        raise GGUFError(f"{where}: tokenizer.ggml.tokens or tokenizer.ggml.merges missing")
    gguf = _gguf()
    types = _meta(f, "tokenizer.ggml.token_type") or [int(gguf.TokenType.NORMAL)] * len(tokens)
    if len(types) != len(tokens):
        raise GGUFError(f"{where}: {len(types)} token types for {len(tokens)} tokens")
    unused, control, user = (int(gguf.TokenType.UNUSED), int(gguf.TokenType.CONTROL),
                             int(gguf.TokenType.USER_DEFINED))
    vocab = {t: i for i, (t, ty) in enumerate(zip(tokens, types)) if int(ty) != unused}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tk = Tokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRE_REGEX[pre]), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    added = [(i, t, int(ty) == control) for i, (t, ty) in enumerate(zip(tokens, types)) if int(ty) in (control, user)]
    tk.add_tokens([AddedToken(t, special=s, normalized=False) for _, t, s in added])

    def tok_of(key):
        i = _meta(f, f"tokenizer.ggml.{key}")
        return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

    out = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=tok_of("eos_token_id"),
                                  bos_token=tok_of("bos_token_id"), pad_token=tok_of("padding_token_id"),
                                  unk_token=tok_of("unknown_token_id"), clean_up_tokenization_spaces=False)
    out.add_special_tokens({"additional_special_tokens": [t for _, t, s in added if s]})
    bad = [(i, t) for i, t, _ in added if out.convert_tokens_to_ids(t) != i]
    if bad:
        raise GGUFError(f"{where}: added tokens landed at other ids than the file's: {bad[:3]}")
    template = _meta(f, "tokenizer.chat_template")
    if template:
        out.chat_template = template
    return out


def eos_ids(path_or_file, name: str = "path") -> list[int]:
    """The ids that end a sequence: the file's eos, eot and eom ids, and the control tokens of
    :data:`EOG_TEXTS` (in file order, each once). Empty when the file names none."""
    f = open_checked(path_or_file, name)
    tokens = _meta(f, "tokenizer.ggml.tokens") or []
    types = _meta(f, "tokenizer.ggml.token_type") or []
    ids = [int(v) for k in _EOS_KEYS if (v := _meta(f, k)) is not None]
    control = int(_gguf().TokenType.CONTROL)
    ids += [i for i, (t, ty) in enumerate(zip(tokens, types)) if t in EOG_TEXTS and int(ty) == control]
    return list(dict.fromkeys(ids))


def with_tokenizer(src, dest, tokenizer) -> Path:
    """Copy the GGUF file ``src`` to ``dest`` with ``tokenizer`` (a fast byte-level BPE tokenizer) written into
    it as ``tokenizer.ggml.*`` (any tokenizer the file had is replaced); metadata and tensors unchanged. Written
    to a temporary name and renamed. Returns ``dest``."""
    gguf = _gguf()
    f = open_checked(src, "src")
    dest = Path(dest)
    tmp = dest.with_name(dest.name + ".partial")
    reader = f._reader
    vocab = int(f.key("vocab_size", 0) or 0) or f.info("token_embd.weight").shape[0]
    w = gguf.GGUFWriter(str(tmp), f.architecture)
    try:
        for key, field in reader.fields.items():
            if key.startswith(("GGUF.", "tokenizer.")) or key == "general.architecture":
                continue
            vtype = field.types[0]
            sub = field.types[-1] if vtype == gguf.GGUFValueType.ARRAY else None
            w.add_key_value(key, field.contents(), vtype, sub_type=sub)
        _add_tokenizer(w, tokenizer, vocab, None)
        for t in reader.tensors:
            w.add_tensor_info(t.name, t.data.shape, t.data.dtype, t.data.nbytes, t.tensor_type)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_ti_data_to_file()
        for t in reader.tensors:
            w.write_tensor_data(t.data)
        w.close()
        shutil.move(str(tmp), str(dest))
    except BaseException:
        w.close()
        tmp.unlink(missing_ok=True)
        raise
    return dest
