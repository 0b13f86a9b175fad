"""Byte-level BPE tokenizer trained with ``tokenizers`` on the training-side
corpora (no eval file is read).

* Qwen2's pre-tokenizer (NFC, split regex, byte level): digits are split one
  per token before BPE, so arithmetic stays learnable;
* special tokens: ``<|endoftext|>`` (EOS), ``<|pad|>``, the chat markers
  ``<|im_start|>``/``<|im_end|>``, the abstention tag ``<abstain>`` and the ten
  trace tags ``<understand>`` ... ``</answer>``;
* a ChatML chat template.

Wrapped as ``transformers.PreTrainedTokenizerFast`` and written with
``save_pretrained`` to ``data/tokenizer/``.

Usage: ``python data/build_tokenizer.py [--out DIR]`` (after the data files).
"""

from __future__ import annotations

try:
    from _common import DATA_DIR, out_dir, sha256_file
except ImportError:
    from data._common import DATA_DIR, out_dir, sha256_file

from t4lib.models import schema
from t4lib.models.corpus import tokenizer_corpus

VOCAB_SIZE = 4096
# Qwen2's pre-tokenizer split: every digit is its own piece (\p{N}).
QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
               r"|\s*[\r\n]+|\s+(?!\S)|\s+")


def train_tokenizer(texts, vocab_size: int = VOCAB_SIZE):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    # Exactly the pipeline transformers 5.x builds for a qwen2 checkpoint
    # (Qwen2Tokenizer: NFC, the Qwen split regex, byte-level), so AutoTokenizer
    # on a model directory and PreTrainedTokenizerFast on tokenizer.json agree.
    tok.normalizer = normalizers.NFC()
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=list(schema.SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  min_frequency=2, show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def wrap(tok):
    """PreTrainedTokenizerFast with EOS/PAD, the other specials and the chat template."""
    from transformers import PreTrainedTokenizerFast
    extra = [t for t in schema.SPECIAL_TOKENS if t not in (schema.EOS, schema.PAD)]
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token=schema.EOS, pad_token=schema.PAD,
                                   model_max_length=1024)
    fast.add_special_tokens({"additional_special_tokens": extra})
    fast.chat_template = schema.CHAT_TEMPLATE
    return fast


def _portable_config(tdir):
    """Make the saved config load under transformers 4.5x and 5.x alike: name
    the class PreTrainedTokenizerFast, list the specials under both keys and
    inline the chat template."""
    import json
    cfg_path = tdir / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    extra = [t for t in schema.SPECIAL_TOKENS if t not in (schema.EOS, schema.PAD)]
    cfg.pop("backend", None)
    cfg.update(tokenizer_class="PreTrainedTokenizerFast", additional_special_tokens=extra,
               extra_special_tokens=extra, chat_template=schema.CHAT_TEMPLATE,
               eos_token=schema.EOS, pad_token=schema.PAD, bos_token=None, unk_token=None,
               clean_up_tokenization_spaces=False, model_max_length=1024)
    cfg_path.write_text(json.dumps(cfg, indent=2, sort_keys=True) + "\n")


def build(out=None, data_root=None) -> list[dict]:
    out = out_dir() if out is None else out
    tok = train_tokenizer(tokenizer_corpus(data_root if data_root is not None else out))
    fast = wrap(tok)
    tdir = out / "tokenizer"
    fast.save_pretrained(str(tdir))
    _portable_config(tdir)
    return [dict(path="tokenizer/tokenizer.json", vocab_size=len(fast),
                 sha256=sha256_file(tdir / "tokenizer.json"))]


if __name__ == "__main__":
    for entry in build():
        print(entry)
