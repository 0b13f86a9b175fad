"""Open entity pools for the procedural corpus: people, things, words and places, drawn from
packages built for it (Faker's first-name lists in eighteen locales and its city generator,
english-words' dictionary lists), never typed here, and split once by a stable hash into a
training pool and a held-out pool (one in five), so evaluation meets names and things the
training stream never used.

The quarantined entities of ``data/honesty_eval.jsonl`` (``QUARANTINE_NAMES``/``ITEMS``)
are in neither pool. Needs the ``corpus`` extra (``faker``, ``english-words``); imported
lazily so the rest of :mod:`t4lib.models` works without it.
"""

from __future__ import annotations

import hashlib
import importlib
from dataclasses import dataclass
from functools import lru_cache

# Reserved for the quarantined honesty eval set only (data/build_honesty.py).
QUARANTINE_NAMES = ["Quentin", "Ulla", "Xavier", "Beatrix", "Ignatius", "Odessa",
                    "Thaddeus", "Wilhelmina", "Cosimo", "Henrietta", "Evander", "Philippa"]
QUARANTINE_ITEMS = [("lanterns", "lantern"), ("thimbles", "thimble"), ("kettles", "kettle"),
                    ("harmonicas", "harmonica"), ("compasses", "compass"), ("acorns", "acorn"),
                    ("teapots", "teapot"), ("candles", "candle")]

POOLS = ("train", "heldout")
_LOCALES = ("en_US", "en_GB", "de_DE", "fr_FR", "es_ES", "it_IT", "nl_NL", "pl_PL", "sv_SE", "pt_BR",
            "da_DK", "fi_FI", "cs_CZ", "en_IN", "ga_IE", "tr_TR", "id_ID", "no_NO")
# word endings that mark adverbs, verb forms and adjectives: not a countable thing
_NOT_THING = ("ly", "ing", "ed", "ous", "ful", "ive", "able", "ible", "ize", "ise", "al", "ic", "ish",
              "less", "ness", "ism", "ity", "est")
_ADJ_ENDINGS = ("ous", "ful", "ish", "ive", "able", "less")
# structural vocabulary (not entities): containers, people groups, tasks, rates
CONTAINERS = [("boxes", "box"), ("bags", "bag"), ("jars", "jar"), ("crates", "crate"), ("baskets", "basket"),
              ("trays", "tray"), ("shelves", "shelf"), ("drawers", "drawer"), ("buckets", "bucket"),
              ("sacks", "sack"), ("bins", "bin"), ("cases", "case"), ("tins", "tin"), ("racks", "rack")]
PEOPLE = [("boys", "girls"), ("adults", "children"), ("teachers", "students"), ("guests", "hosts"),
          ("players", "coaches"), ("nurses", "doctors"), ("drivers", "riders"), ("singers", "dancers")]
WHOLES = ["the fence", "the garden", "the report", "the puzzle", "the wall", "the field", "the attic",
          "the map", "the quilt", "the mural", "the hallway", "the orchard", "the roof", "the path"]
# (what one does per unit of time, with {n} for the amount; the thing counted)
ACTS = [("reads {n} pages", "pages"), ("walks {n} km", "km"), ("saves {n} dollars", "dollars"),
        ("fills {n} liters", "liters"), ("writes {n} lines", "lines"), ("paints {n} tiles", "tiles"),
        ("plants {n} seeds", "seeds"), ("bakes {n} rolls", "rolls"), ("sews {n} patches", "patches"),
        ("types {n} words", "words"), ("packs {n} parcels", "parcels"), ("runs {n} laps", "laps")]
UNITS = [("hours", "hour"), ("days", "day"), ("minutes", "minute"), ("weeks", "week")]
_BLOCK = {"nigger", "nigga", "faggot", "fag", "retard", "slut", "whore", "cunt", "rape", "rapist", "kike",
          "spic", "chink", "queer", "gay", "lesbian", "jew", "jews", "negroes", "dyke", "tranny", "negro", "coon", "gook", "wetback", "bitch", "bastard", "penis",
          "vagina", "anus", "dick", "cock", "porn", "sex", "nazi", "hitler", "suicide", "murder", "corpse"}


def bucket(text: str) -> str:
    """``"heldout"`` for one word in five (a stable sha1 hash of the lower-cased text), else ``"train"``."""
    return "heldout" if hashlib.sha1(text.lower().encode()).digest()[0] % 5 == 0 else "train"


def plural(word: str) -> str:
    if word.endswith(("s", "x", "z", "ch", "sh")):
        return word + "es"
    if word.endswith("y") and word[-2:-1] not in "aeiou":
        return word[:-1] + "ies"
    return word + "s"


@dataclass(frozen=True)
class Pool:
    """One split's entities, each list sorted (deterministic across runs)."""
    names: tuple[str, ...]
    items: tuple[tuple[str, str], ...]      # (plural, singular)
    words: tuple[str, ...]                  # free vocabulary for copy tasks
    adjectives: tuple[str, ...]
    cities: tuple[str, ...]


def _first_names() -> set[str]:
    out = set()
    for loc in _LOCALES:
        try:
            fn = importlib.import_module(f"faker.providers.person.{loc}").Provider.first_names
        except (ImportError, AttributeError):
            continue
        out.update(n for n in (fn.keys() if isinstance(fn, dict) else fn) if n.isascii() and n.isalpha())
    return out


def _cities(n: int = 4000) -> set[str]:
    """Faker's generated cities, less any built on a quarantined name ("Lake Xavier")."""
    from faker import Faker  # optional: faker (the corpus extra)
    fk = Faker("en_US")
    fk.seed_instance(0)
    quarantine = set(QUARANTINE_NAMES)
    return {c for c in (fk.city() for _ in range(n)) if c.isascii() and not quarantine & set(c.split())}


@lru_cache(maxsize=None)
def pools() -> dict[str, Pool]:
    """``{"train": Pool, "heldout": Pool}``; ImportError naming the ``corpus`` extra when Faker or
    english-words is missing."""
    try:
        from english_words import get_english_words_set  # optional: english-words (the corpus extra)
    except ImportError as e:  # optional dependency: only the procedural corpus needs it
        raise ImportError("the procedural corpus needs the corpus extra: pip install 't4lib[corpus]' "
                          "(faker, english-words)") from e
    common = get_english_words_set(["web2"], alpha=True, lower=True) & \
        get_english_words_set(["gcide"], alpha=True, lower=True)
    common = {w for w in common if w not in _BLOCK and w.isascii()}
    quarantine = {n.lower() for n in QUARANTINE_NAMES} | {w for pair in QUARANTINE_ITEMS for w in pair}
    structural = {w for pair in CONTAINERS for w in pair} | {w for pair in PEOPLE for w in pair}
    things = sorted(w for w in common if 4 <= len(w) <= 9 and not w.endswith(_NOT_THING)
                    and plural(w) not in quarantine and w not in quarantine and w not in structural)
    adjectives = sorted(w for w in common if 5 <= len(w) <= 10 and w.endswith(_ADJ_ENDINGS))
    words = sorted(w for w in common if 3 <= len(w) <= 10 and w not in quarantine)
    names = sorted(n for n in _first_names() if n.lower() not in quarantine and 3 <= len(n) <= 10)
    cities = sorted(_cities())
    out = {}
    for split in POOLS:
        out[split] = Pool(names=tuple(n for n in names if bucket(n) == split),
                          items=tuple((plural(w), w) for w in things if bucket(w) == split),
                          words=tuple(w for w in words if bucket(w) == split),
                          adjectives=tuple(w for w in adjectives if bucket(w) == split),
                          cities=tuple(c for c in cities if bucket(c) == split))
    return out


def pool_for(split: str) -> Pool:
    """The pool a data split draws from: ``train`` for training, ``heldout`` for validation and test."""
    if split not in ("train", "validation", "test"):
        raise ValueError(f"split must be one of ['test', 'train', 'validation'], got {split!r}")
    return pools()["train" if split == "train" else "heldout"]
