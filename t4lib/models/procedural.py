"""A procedural corpus that never repeats: word problems rendered through a sentence grammar,
traps whose needed number is vague, missing or contradicted, reading questions, and
input-grounded copy/edit tasks over open vocabularies.

Every document is drawn from a ``random.Random``: the same seed gives the same documents.
Three splits: ``train`` uses the training productions of :mod:`t4lib.models.grammar` and the
training pools of :mod:`t4lib.models.pools`; ``validation`` and ``test`` use the held-out
productions and pools (recipes are chosen on validation, figures reported on test; the two
are disjoint samples of one distribution).

A problem's arithmetic is exact (:class:`fractions.Fraction`); the step chain, plan and
verify lines make the five-tag trace, which :func:`t4lib.models.schema.certify_trace` checks.

Structures (``STRUCTURES``): add, sub, mul, div, pct_of, pct_off, rate_dist, rate_time,
frac_add, frac_of, lin, add_mul, mul_sub, sub_div, two_products, shop_change (the sixteen of
``data/build_math.py``) and add_sub, add_add, compare, times.

Traps come with answerable twins in the same surface forms (a vague count about someone else's
things, a restatement of the starting amount that agrees), so abstaining depends on whether the
needed quantity is usable, not on how the text looks.
"""

from __future__ import annotations

import math
import random
import re
import string
from dataclasses import dataclass, field
from fractions import Fraction
from functools import lru_cache
from itertools import accumulate

from t4lib.models import grammar, schema
from t4lib.models.grammar import SPLITS, check_split
from t4lib.models.pools import ACTS, CONTAINERS, PEOPLE, UNITS, WHOLES, pool_for, pools

_NUMBER_WORDS = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
                 "fifteen sixteen seventeen eighteen nineteen twenty").split()
_COUNTS = ("n", "m", "g", "per", "t", "k")


def check_seed(seed) -> int:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__} {seed!r}")
    return seed


@dataclass
class Sentence:
    slot: str
    values: dict                      # placeholder -> value (int, Fraction, str)
    need: str | None = None           # the placeholder holding a needed quantity (None: none)
    droppable: bool = True            # without this sentence the question cannot be answered


@dataclass
class Problem:
    structure: str
    sentences: list[Sentence]
    question: Sentence
    steps: list[tuple[str, Fraction]]           # (expression, value)
    plan: list[str]
    verify: list[str]
    given: list[tuple[str, object]]             # (role, value as written): the understand section
    extra: dict = field(default_factory=dict)

    @property
    def answer(self) -> Fraction:
        return self.steps[-1][1]


def fmt(x) -> str:
    return str(Fraction(x))


def _step(expr: str, value) -> tuple[str, Fraction]:
    return expr, Fraction(value)


# ----------------------------------------------------------------------------- structures

def _add(r):
    a, b = r.randint(3, 60), r.randint(2, 40)
    return Problem("add", [Sentence("have", dict(n=a), "n"), Sentence("gain", dict(n=b), "n", False)],
                   Sentence("q_now", {}),
                   [_step(f"{a} + {b}", a + b)], ["Add the amount gained to the starting amount."],
                   [f"{a + b} - {b} = {a}"], [("starting amount", a), ("amount gained", b)])


def _sub(r):
    a = r.randint(15, 90)
    b = r.randint(2, a - 3)
    return Problem("sub", [Sentence("have", dict(n=a), "n"), Sentence("lose", dict(n=b), "n", False)],
                   Sentence("q_now", {}),
                   [_step(f"{a} - {b}", a - b)], ["Subtract the amount lost from the starting amount."],
                   [f"{a - b} + {b} = {a}"], [("starting amount", a), ("amount lost", b)])


def _add_sub(r):
    a, b = r.randint(10, 60), r.randint(2, 30)
    c = r.randint(2, a + b - 2)
    return Problem("add_sub", [Sentence("have", dict(n=a), "n"), Sentence("gain", dict(n=b), "n", False),
                               Sentence("lose", dict(n=c), "n", False)], Sentence("q_now", {}),
                   [_step(f"{a} + {b}", a + b), _step(f"{a + b} - {c}", a + b - c)],
                   ["Add the amount gained to the starting amount.", "Subtract the amount lost."],
                   [f"{a + b - c} + {c} - {b} = {a}"], [("starting amount", a), ("amount gained", b),
                                                        ("amount lost", c)])


def _add_add(r):
    a, b, c = r.randint(3, 50), r.randint(2, 30), r.randint(2, 30)
    return Problem("add_add", [Sentence("have", dict(n=a), "n"), Sentence("gain", dict(n=b), "n", False),
                               Sentence("gain", dict(n=c), "n", False)], Sentence("q_now", {}),
                   [_step(f"{a} + {b}", a + b), _step(f"{a + b} + {c}", a + b + c)],
                   ["Add the first amount gained to the starting amount.", "Add the second amount gained."],
                   [f"{a + b + c} - {c} - {b} = {a}"], [("starting amount", a), ("first amount gained", b),
                                                        ("second amount gained", c)])


def _mul(r):
    g, per = r.randint(2, 12), r.randint(2, 15)
    return Problem("mul", [Sentence("groups", dict(g=g, per=per), r.choice(["g", "per"]))], Sentence("q_total", {}),
                   [_step(f"{g} * {per}", g * per)], ["Multiply the number of groups by the amount in each."],
                   [f"{g * per} / {per} = {g}"], [("number of groups", g), ("amount in each", per)])


def _div(r):
    g, q = r.randint(2, 9), r.randint(2, 12)
    return Problem("div", [Sentence("share", dict(n=g * q, g=g), r.choice(["n", "g"]))], Sentence("q_each", {}),
                   [_step(f"{g * q} / {g}", q)], ["Divide the total by the number of equal parts."],
                   [f"{q} * {g} = {g * q}"], [("total", g * q), ("number of equal parts", g)])


def _pct_base(r, pct, lo, hi):
    unit = 100 // math.gcd(pct, 100)
    return unit * r.randint(max(1, -(-lo // unit)), max(1, hi // unit))


def _pct_of(r):
    pct = r.choice([10, 20, 25, 50, 75])
    a = _pct_base(r, pct, 20, 200)
    v = a * pct // 100
    return Problem("pct_of", [Sentence("have", dict(n=a), "n"), Sentence("part_pct", dict(pct=pct), "pct")],
                   Sentence("q_adj", {}), [_step(f"{a} * {pct} / 100", v)],
                   ["Take the percentage of the whole: whole times percent over 100."],
                   [f"{v} * 100 / {pct} = {a}"], [("whole", a), ("percent", pct)])


def _frac_of(r):
    den = r.choice([2, 3, 4, 5, 8, 10])
    p, a = r.randint(1, den - 1), den * r.randint(2, 12)
    v = Fraction(a * p, den)
    return Problem("frac_of", [Sentence("have", dict(n=a), "n"), Sentence("part_frac", dict(f=f"{p}/{den}"), "f")],
                   Sentence("q_adj", {}), [_step(f"{a} * {p} / {den}", v)],
                   ["Take the fraction of the whole: whole times numerator over denominator."],
                   [f"{fmt(v)} * {den} / {p} = {a}"], [("whole", a), ("fraction", f"{p}/{den}")])


def _pct_off(r):
    pct = r.choice([10, 20, 25, 50])
    a = _pct_base(r, pct, 20, 200)
    off = a * pct // 100
    return Problem("pct_off", [Sentence("price", dict(money=a), "money"), Sentence("discount", dict(pct=pct), "pct")],
                   Sentence("q_price", {}), [_step(f"{a} * {pct} / 100", off), _step(f"{a} - {off}", a - off)],
                   ["Find the amount taken off.", "Subtract it from the original price."],
                   [f"{a - off} + {a} * {pct} / 100 = {a}"], [("original price", a), ("percent off", pct)])


def _rate_dist(r):
    s, t = r.randint(3, 60), r.randint(2, 9)
    return Problem("rate_dist", [Sentence("rate", dict(n=s), "n"), Sentence("duration", dict(t=t), "t")],
                   Sentence("q_rate_total", {}), [_step(f"{s} * {t}", s * t)], ["Multiply the rate by the time."],
                   [f"{s * t} / {t} = {s}"], [("rate", s), ("time", t)])


def _rate_time(r):
    s, t = r.randint(2, 15), r.randint(2, 12)
    return Problem("rate_time", [Sentence("goal", dict(n=s * t), "n"), Sentence("rate", dict(n=s), "n")],
                   Sentence("q_how_long", {}), [_step(f"{s * t} / {s}", t)], ["Divide the total by the rate."],
                   [f"{t} * {s} = {s * t}"], [("total needed", s * t), ("rate", s)])


def _frac_add(r):
    den = r.randint(3, 12)
    p = r.randint(1, den - 2)
    q = r.randint(1, den - 1 - p)
    v = Fraction(p + q, den)
    return Problem("frac_add", [Sentence("part_task", dict(f=f"{p}/{den}", who="A"), "f"),
                                Sentence("part_task", dict(f=f"{q}/{den}", who="B"), "f")],
                   Sentence("q_task", {}), [_step(f"{p}/{den} + {q}/{den}", v)],
                   ["Add the two fractions with the same denominator."],
                   [f"{fmt(v)} - {q}/{den} = {fmt(Fraction(p, den))}"],
                   [("first part", f"{p}/{den}"), ("second part", f"{q}/{den}")])


def _lin(r):
    x, k, b = r.randint(2, 15), r.randint(2, 9), r.randint(1, 30)
    c = k * x + b
    return Problem("lin", [], Sentence("linear", dict(k=k, n=b, m=c)),
                   [_step(f"{c} - {b}", c - b), _step(f"{c - b} / {k}", x)],
                   ["Subtract the added amount from the result.", "Divide by the multiplier."],
                   [f"{k} * {x} + {b} = {c}"], [("multiplier", k), ("amount added", b), ("result", c)])


def _add_mul(r):
    a, b, c = r.randint(2, 9), r.randint(2, 9), r.randint(2, 12)
    return Problem("add_mul", [Sentence("two_counts", dict(n=a, m=b), r.choice(["n", "m"])),
                               Sentence("each_gets", dict(k=c), "k")], Sentence("q_handed_total", {}),
                   [_step(f"{a} + {b}", a + b), _step(f"{a + b} * {c}", (a + b) * c)],
                   ["Add the two group counts.", "Multiply by the amount each one gets."],
                   [f"{(a + b) * c} / {c} - {b} = {a}"], [("first count", a), ("second count", b), ("amount each", c)])


def _mul_sub(r):
    g, per = r.randint(2, 9), r.randint(3, 12)
    c = r.randint(1, g * per - 1)
    return Problem("mul_sub", [Sentence("groups", dict(g=g, per=per), r.choice(["g", "per"])),
                               Sentence("lose", dict(n=c), "n", False)], Sentence("q_now", {}),
                   [_step(f"{g} * {per}", g * per), _step(f"{g * per} - {c}", g * per - c)],
                   ["Multiply to get the total.", "Subtract the amount taken away."],
                   [f"({g * per - c} + {c}) / {per} = {g}"], [("number of groups", g), ("amount in each", per),
                                                              ("amount taken away", c)])


def _sub_div(r):
    b, g, q = r.randint(1, 20), r.randint(2, 8), r.randint(2, 10)
    a = b + g * q
    return Problem("sub_div", [Sentence("have", dict(n=a), "n"), Sentence("keep", dict(n=b), "n", False),
                               Sentence("share_rest", dict(g=g), "g")], Sentence("q_each", {}),
                   [_step(f"{a} - {b}", a - b), _step(f"{a - b} / {g}", q)],
                   ["Subtract the amount kept aside.", "Divide the rest into equal parts."],
                   [f"{q} * {g} + {b} = {a}"], [("total", a), ("amount kept", b), ("number of parts", g)])


def _compare(r):
    a = r.randint(10, 90)
    b = r.randint(2, a - 1)
    return Problem("compare", [Sentence("have", dict(n=a), "n"), Sentence("compare_have", dict(m=b), "m")],
                   Sentence("q_more", {}), [_step(f"{a} - {b}", a - b)], ["Subtract the smaller count from the larger."],
                   [f"{b} + {a - b} = {a}"], [("first count", a), ("second count", b)])


def _times(r):
    a, k = r.randint(2, 20), r.randint(2, 9)
    return Problem("times", [Sentence("have", dict(n=a), "n"), Sentence("times_as_many", dict(k=k), "k")],
                   Sentence("q_b", {}), [_step(f"{a} * {k}", a * k)], ["Multiply the first count by the factor."],
                   [f"{a * k} / {k} = {a}"], [("first count", a), ("factor", k)])


def _two_products(r):
    a, b, c, d = r.randint(2, 9), r.randint(2, 12), r.randint(2, 9), r.randint(2, 12)
    return Problem("two_products", [Sentence("buy", dict(n=a, money=b, kind=0), r.choice(["n", "money"]), False),
                                    Sentence("buy", dict(n=c, money=d, kind=1), r.choice(["n", "money"]), False)],
                   Sentence("q_spend", {}),
                   [_step(f"{a} * {b}", a * b), _step(f"{c} * {d}", c * d), _step(f"{a * b} + {c * d}", a * b + c * d)],
                   ["Cost of the first kind.", "Cost of the second kind.", "Add the two costs."],
                   [f"{a * b + c * d} - {c * d} = {a * b}"],
                   [("first count", a), ("first price", b), ("second count", c), ("second price", d)])


def _shop_change(r):
    a, b, c, d = r.randint(2, 6), r.randint(2, 9), r.randint(2, 6), r.randint(2, 9)
    e = a * b + c * d + r.randint(1, 40)
    t = a * b + c * d
    return Problem("shop_change", [Sentence("money", dict(money=e), "money"),
                                   Sentence("buy", dict(n=a, money=b, kind=0), r.choice(["n", "money"]), False),
                                   Sentence("buy", dict(n=c, money=d, kind=1), r.choice(["n", "money"]), False)],
                   Sentence("q_change", {}),
                   [_step(f"{a} * {b}", a * b), _step(f"{c} * {d}", c * d), _step(f"{a * b} + {c * d}", t),
                    _step(f"{e} - {t}", e - t)],
                   ["Cost of the first kind.", "Cost of the second kind.", "Add them.",
                    "Subtract the sum from the starting money."],
                   [f"{e} - {e - t} - {c * d} = {a * b}"],
                   [("starting money", e), ("first count", a), ("first price", b), ("second count", c),
                    ("second price", d)])


STRUCTURES = {f.__name__[1:]: f for f in (
    _add, _sub, _mul, _div, _pct_of, _pct_off, _rate_dist, _rate_time, _frac_add, _frac_of, _lin, _add_mul,
    _mul_sub, _sub_div, _two_products, _shop_change, _add_sub, _add_add, _compare, _times)}
#: structures whose traps drop or blur a quantity (lin states everything in one sentence)
_TRAPPABLE = tuple(s for s in STRUCTURES if s != "lin")


# ----------------------------------------------------------------------------- rendering

def _count(r, n: int, words: bool) -> str:
    return _NUMBER_WORDS[n] if words and 2 <= n <= 20 and r.random() < 0.15 else str(n)


def _render_value(r, key: str, value, vague: bool, words: bool) -> str:
    if key == "pct":
        if vague:
            return r.choice(["a certain percent", "some percent"])
        return f"{value}%" if r.random() < 0.7 else f"{value} percent"
    if key in ("f", "f2"):
        return r.choice(["part", "some part"]) if vague else str(value)   # as written: 5/10 stays 5/10
    if key in ("money", "money2"):
        return r.choice(["a certain amount", "some amount"]) if vague else (
            f"{value} dollars" if r.random() < 0.8 else f"${value}")
    if key in _COUNTS:
        return r.choice(grammar.VAGUE) if vague else _count(r, value, words)
    return str(value)


class Context:
    """The entities of one document: people, things, containers, drawn from a split's pool; ``frames``
    records every (slot, production) the document is rendered with."""

    def __init__(self, r: random.Random, split: str):
        pool = pool_for(split)
        self.r, self.split = r, split
        self.A, self.B, self.C = r.sample(pool.names, 3)
        self.items = r.sample(pool.items, 3)          # [0]: the problem's things, [1]: second kind, [2]: distractor
        self.adj = r.choice(pool.adjectives)
        self.city = r.choice(pool.cities)
        self.cont = r.choice(CONTAINERS)
        self.people = r.choice(PEOPLE)
        self.whole = r.choice(WHOLES)
        self.act, self.thing = r.choice(ACTS)
        self.unit = r.choice(UNITS)
        self.frames: list[tuple[str, str]] = []

    def fields(self, kind: int = 0) -> dict:
        pl, sg = self.items[kind]
        return dict(A=self.A, B=self.B, C=self.C, items=pl, item=sg, items2=self.items[2][0], adj=self.adj,
                    city=self.city, conts=self.cont[0], cont=self.cont[1], people1=self.people[0],
                    people2=self.people[1], whole=self.whole, thing=self.thing, units=self.unit[0],
                    unit=self.unit[1])


_ARTICLE = re.compile(r"\b([Aa]) ([aeiouAEIOU])")
# a vague phrase ending in "of" before "of the ...", or before "more"/"times": keep the sentence grammatical
_OF_OF = re.compile(r"\b(of) of\b")
_VAGUE_BEFORE = re.compile(r"\b(?:a number of|lots of|a handful of|plenty of|some) (more|extra|additional|further|new|"
                           r"times)\b", re.IGNORECASE)


def _fill(r, ctx: Context, s: Sentence, template: str, vague: str | None, words: bool) -> str:
    f = ctx.fields(s.values.get("kind", 0))
    who = s.values.get("who")
    if who:
        f["A"] = getattr(ctx, who)
    rendered = {k: _render_value(r, k, v, k == vague, words) for k, v in s.values.items() if k not in ("kind", "who")}
    if "{act}" in template:
        amount = rendered.pop("n")
        f["act"] = ctx.act.format(n=amount)
    f.update(rendered)
    text = _ARTICLE.sub(lambda m: m.group(1) + "n " + m.group(2), template.format(**f))
    if vague:
        text = _VAGUE_BEFORE.sub(r"several \1", _OF_OF.sub("of", text))
    return text[0].upper() + text[1:]


def _sentence(r, ctx: Context, s: Sentence, vague: str | None = None, words: bool = True) -> str:
    frame = grammar.sample(r, s.slot, ctx.split)
    ctx.frames.append((s.slot, frame))
    return _fill(r, ctx, s, frame, vague, words)


def _distractors(r, ctx: Context, p: float) -> list[str]:
    """Up to two sentences with numbers no question needs, in distinct patterns (two "is N years old"
    would contradict each other)."""
    out, used = [], set()
    for _ in range(2):
        if r.random() < p:
            frame = grammar.sample(r, "distract", ctx.split)
            key = frame.split(" {m}")[0]
            if key not in used:
                used.add(key)
                ctx.frames.append(("distract", frame))
                out.append(_fill(r, ctx, Sentence("distract", dict(m=r.randint(2, 90))), frame, None, False))
    return out


@dataclass
class MathDoc:
    """A rendered problem: ``answer`` is None for a trap (the right reply is the abstention tag)."""
    structure: str
    question: str
    answer: str | None
    steps: list[str]
    trap: str | None = None                 # None, "vague", "missing", "contradiction"
    problem: Problem | None = None
    frames: list[tuple[str, str]] = field(default_factory=list)   # (slot, production) of each sentence, in order
    decoy: str | None = None                # an answerable twin of a trap: "vague" or "contradiction"

    @property
    def n_steps(self) -> int:
        return len(self.steps)


TRAPS = ("vague", "missing", "contradiction")
DECOYS = ("vague", "contradiction")
# slots whose sentence, told about the third person and their things, cannot touch the question
_DECOY_SLOTS = ("have", "gain", "lose", "groups")


def _decoy_sentence(r, ctx: Context, sents: list[Sentence]) -> str:
    """A vague count the question does not need: the sentence of a trap's target, told about someone else
    and other things (a vague trap's twin)."""
    s = sents[r.randrange(len(sents))] if sents else None
    if s is not None and s.slot in _DECOY_SLOTS:
        twin = Sentence(s.slot, {**s.values, "kind": 2, "who": "C"}, s.need)
    else:
        twin = Sentence("have", dict(n=r.randint(2, 40), kind=2, who="C"), "n")
    return _sentence(r, ctx, twin, vague=twin.need)


def render_problem(r: random.Random, split: str, structure: str | None = None, trap: str | None = None,
                   distractors: float = 0.35, decoy: str | None = None) -> MathDoc:
    """One word problem of ``structure`` (random when None) in ``split``'s productions and pools;
    ``trap`` in (None, "vague", "missing", "contradiction") makes the needed number unusable;
    ``decoy`` in (None, "vague", "contradiction") keeps the problem answerable but adds a trap's surface: a
    vague count about someone else, or a restatement of the starting amount that agrees with it.
    A "missing" trap drops only a sentence without which the question has no answer (a problem with none
    becomes a "vague" trap), a "contradiction" needs a stated starting amount (else "vague")."""
    if structure is None:
        structure = r.choice(_TRAPPABLE if trap or decoy else tuple(STRUCTURES))
    if structure not in STRUCTURES:
        raise ValueError(f"structure must be one of {sorted(STRUCTURES)}, got {structure!r}")
    if trap not in (None, *TRAPS):
        raise ValueError(f"trap must be None, 'vague', 'missing' or 'contradiction', got {trap!r}")
    if decoy not in (None, *DECOYS):
        raise ValueError(f"decoy must be None, 'vague' or 'contradiction', got {decoy!r}")
    if trap and decoy:
        raise ValueError("a problem is a trap or a decoy, not both")
    p = STRUCTURES[structure](r)
    ctx = Context(r, split)
    sents = list(p.sentences)
    starts_with_amount = bool(sents) and sents[0].slot == "have"
    if trap == "contradiction" and not starts_with_amount:
        trap = "vague"
    if decoy == "contradiction" and not starts_with_amount:
        decoy = "vague"
    target = None
    if trap == "missing":
        droppable = [i for i, s in enumerate(sents) if s.droppable]
        if len(sents) > 1 and droppable:
            target = r.choice(droppable)
        else:
            trap = "vague"
    if trap == "vague":
        target = r.randrange(len(sents))
    texts = []
    for i, s in enumerate(sents):
        if trap == "missing" and i == target:
            continue
        texts.append(_sentence(r, ctx, s, vague=s.need if trap == "vague" and i == target else None))
    if trap == "contradiction" or decoy == "contradiction":
        first = sents[0].values["n"]
        other = max(1, first + r.choice([-1, 1]) * r.randint(1, max(1, first // 2))) if trap else first
        if other == first and trap:
            other = first + 1
        texts.insert(r.randint(1, len(texts)), _sentence(r, ctx, Sentence("restate", dict(n=other))))
    if decoy == "vague":
        texts.insert(r.randint(0, len(texts)), _decoy_sentence(r, ctx, sents))
    for d in _distractors(r, ctx, distractors):
        texts.insert(r.randint(0, len(texts)), d)
    texts.append(_sentence(r, ctx, p.question))
    question = " ".join(texts)
    if trap:
        return MathDoc(structure, question, None, [], trap, p, ctx.frames)
    return MathDoc(structure, question, fmt(p.answer), [f"{e} = {fmt(v)}" for e, v in p.steps], None, p, ctx.frames,
                   decoy)


def render_lookup(r: random.Random, split: str, trap: str | None = None) -> MathDoc:
    """A reading question: two to four people's counts are stated (one maybe vaguely), one is asked.
    ``trap``: the asked count is vague ("vague") or never stated ("missing")."""
    if trap not in (None, "vague", "missing"):
        raise ValueError(f"trap must be None, 'vague' or 'missing', got {trap!r}")
    ctx = Context(r, split)
    pool = pool_for(split)
    people = r.sample(pool.names, r.randint(2, 4))
    counts = [r.randint(2, 90) for _ in people]
    ask = r.randrange(len(people))
    texts = []
    for i, (name, n) in enumerate(zip(people, counts)):
        if trap == "missing" and i == ask:
            continue
        vague = (trap == "vague" and i == ask) or (i != ask and r.random() < 0.25)
        ctx.A = name
        texts.append(_sentence(r, ctx, Sentence("have", dict(n=n), "n"), vague="n" if vague else None))
    for d in _distractors(r, ctx, 0.15):
        texts.insert(r.randint(0, len(texts)), d)
    ctx.A = people[ask]
    texts.append(_sentence(r, ctx, Sentence("q_lookup", {})))
    if trap:
        return MathDoc("lookup", " ".join(texts), None, [], trap, frames=ctx.frames)
    return MathDoc("lookup", " ".join(texts), str(counts[ask]), [], frames=ctx.frames)


def trace_of(doc: MathDoc) -> str:
    """The five-tag trace of an answerable problem (certified by :func:`schema.certify_trace` in the tests
    and the data build)."""
    p = doc.problem
    if p is None or doc.answer is None:
        raise ValueError("trace_of needs an answerable rendered problem")
    given = ", ".join(f"{role} = {v}" for role, v in p.given)
    find = doc.question.rsplit(". ", 1)[-1]
    return schema.render_trace(understand=f"Given: {given}. Find: {find}", plan=list(p.plan),
                               compute=list(doc.steps), verify=list(p.verify), answer=doc.answer)


#: the seed of the committed SFT traces (``data/open_traces.jsonl``: the first 4000 of this stream)
TRACE_SEED = 4243


def certified_traces(n: int, seed: int = TRACE_SEED) -> list[dict]:
    """``n`` five-tag traces of training-split problems, cycling through the structures, each certified with
    SymPy (:func:`schema.certify_trace`, which raises if anything is off). Deterministic in ``seed``; the first
    ``k`` of ``n`` are the ``k`` of a shorter call, so more traces extend the committed file rather than replace it."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    r = random.Random(check_seed(seed))
    names = list(STRUCTURES)
    out = []
    for i in range(n):
        d = render_problem(r, "train", names[i % len(names)])
        t = trace_of(d)
        schema.certify_trace(t, expected_answer=d.answer)
        out.append(dict(id=f"open-trace-{i:05d}", structure=d.structure, n_steps=d.n_steps, question=d.question,
                        answer=d.answer, trace=t, certified=True))
    return out


def plain_problems(n: int, seed: int) -> list[tuple[str, str]]:
    """``n`` training-split problems in the pretraining's plain format, ``(prompt, completion)`` without EOS
    (as :func:`document` renders a ``problem`` document): plain-format replay for SFT."""
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"n must be a positive int, got {n!r}")
    r = random.Random(check_seed(seed) * 1_000_003 + 7)
    return [math_pair(render_problem(r, "train")) for _ in range(n)]


# ----------------------------------------------------------------------------- copy/edit tasks

def _ident(r) -> str:
    return r.choice(string.ascii_lowercase) + "".join(r.choices(string.ascii_lowercase + string.digits,
                                                                k=r.randint(2, 6)))


_VOWELS = ("a", "e", "i", "o", "u", "ou", "ea", "io")
_ONSETS = tuple("bcdfghjklmnprstvwz") + ("br", "ch", "cl", "dr", "gr", "pl", "sh", "st", "th", "tr")


@lru_cache(maxsize=None)
def _heldout_words() -> frozenset[str]:
    return frozenset(pools()["heldout"].words)


def pseudo_word(r: random.Random, words) -> str:
    """A made-up word: a training word with one letter changed, dropped, doubled or swapped, two
    training words spliced, or a string of syllables. A model copies it right only by copying its
    pieces, not by recalling a spelling it has memorised (as held-out words demand). Never a
    held-out word."""
    while True:
        w = r.choice(words)
        k = r.randrange(3)
        if k == 0:
            i, op = r.randrange(len(w)), r.randrange(4)
            c = r.choice(string.ascii_lowercase)
            w = (w[:i] + c + w[i + 1:], w[:i] + w[i + 1:], w[:i] + w[i] + w[i:],
                 w[:i] + w[i + 1:i + 2] + w[i] + w[i + 2:])[op]
        elif k == 1:
            v = r.choice(words)
            w = w[:r.randint(2, max(2, len(w) - 1))] + v[r.randint(1, max(1, len(v) - 2)):]
        else:
            w = "".join(r.choice(_ONSETS) + r.choice(_VOWELS) for _ in range(r.randint(2, 4)))
            w += r.choice(("", "n", "r", "s", "t", "l"))
        if len(w) >= 3 and w not in _heldout_words():
            return w


def check_pseudo_words(pseudo_words, split: str) -> float:
    if isinstance(pseudo_words, bool) or not isinstance(pseudo_words, (int, float)) or not 0 <= pseudo_words <= 1:
        raise ValueError(f"pseudo_words must be a number in [0, 1], got {pseudo_words!r}")
    if pseudo_words and split != "train":
        raise ValueError(f"pseudo_words is for the train split only (evaluation sets copy held-out words), "
                         f"got split {split!r} with pseudo_words={pseudo_words}")
    return float(pseudo_words)


def _word_source(r, words, pseudo_words: float):
    """Draws a copy task's free words: from ``words``, or a :func:`pseudo_word` with probability
    ``pseudo_words`` (0 draws exactly as a plain ``r.choice(words)``: the committed sets are unchanged)."""
    if not pseudo_words:
        return lambda: r.choice(words)
    return lambda: pseudo_word(r, words) if r.random() < pseudo_words else r.choice(words)


def _lines(r, word, n_lines: int) -> list[str]:
    out = []
    for _ in range(n_lines):
        toks = [word() if r.random() < 0.75 else (str(r.randint(0, 9999)) if r.random() < 0.5 else _ident(r))
                for _ in range(r.randint(3, 8))]
        out.append(" ".join(toks))
    return out


def _code(r, word, n_lines: int, names: list[str]) -> list[str]:
    lines = []
    for _ in range(n_lines):
        kw = r.choice(grammar.KEYWORDS)
        a, b = r.choice(names), r.choice(names)
        form = r.randrange(4)
        if form == 0:
            lines.append(f"{kw} {a} = {b} + {r.randint(0, 99)}")
        elif form == 1:
            lines.append(f"{kw} {a}({b}, {word()})")
        elif form == 2:
            lines.append(f"{a}.{word()} = {kw}({b})")
        else:
            lines.append(f"{kw} {a} {word()} {b}")
    return lines


def _records(r, word, names, n: int, fields: list[str]) -> list[dict]:
    recs = []
    for _ in range(n):
        rec = {}
        for fname in fields:
            rec[fname] = {"name": lambda: r.choice(names), "city": lambda: word().capitalize(),
                          "code": lambda: _ident(r), "count": lambda: str(r.randint(0, 999)),
                          "item": word, "year": lambda: str(r.randint(1900, 2030))}[fname]()
        recs.append(rec)
    return recs


@dataclass
class CopyDoc:
    kind: str
    instruction: str
    input: str
    output: str
    frame: str = ""          # the instruction's production, placeholders unfilled


COPY_KINDS = tuple(grammar.COPY_INSTRUCTIONS)
#: how often each kind is drawn: the line-wise edits (rename, bullets, number, csv) are the hardest to
#: learn, so they come more often than a plain copy
COPY_WEIGHTS = {"copy": 1.0, "rename": 2.0, "bullets": 1.5, "number": 1.5, "csv": 2.0, "extract": 0.5, "fix": 1.0}


def copy_size(r: random.Random, kind: str) -> int:
    """The size of a training copy task in lines (twice the records, as ``size`` counts them): short ones,
    and long ones whose outputs run to 100-400 tokens while the whole document stays under 1024 tokens."""
    lines = r.randint(2, 8) if r.random() < 0.35 else r.randint(8, 20)
    return 2 * lines if kind in ("csv", "extract") else lines


def render_copy(r: random.Random, split: str, kind: str | None = None,
                size: tuple[int, int] | None = None, pseudo_words: float = 0.0) -> CopyDoc:
    """An input-grounded task whose output mostly copies the input; ``size``: lines (or twice the records)
    range, or None for the training mix of lengths (:func:`copy_size`); ``pseudo_words``: the share of
    free words made up (:func:`pseudo_word`; train split only)."""
    pseudo_words = check_pseudo_words(pseudo_words, split)
    kind = kind or r.choices(COPY_KINDS, weights=[COPY_WEIGHTS[k] for k in COPY_KINDS])[0]
    if kind not in COPY_KINDS:
        raise ValueError(f"kind must be one of {list(COPY_KINDS)}, got {kind!r}")
    pool = pool_for(split)
    word, names = _word_source(r, pool.words, pseudo_words), pool.names
    instr = grammar.sample(r, f"copy:{kind}", split)
    n = copy_size(r, kind) if size is None else r.randint(*size)
    if kind in ("copy", "bullets", "number"):
        lines = _lines(r, word, n)
        out = {"copy": lines, "bullets": [f"- {ln}" for ln in lines],
               "number": [f"{i + 1}. {ln}" for i, ln in enumerate(lines)]}[kind]
        return CopyDoc(kind, instr, "\n".join(lines), "\n".join(out), instr)
    if kind in ("rename", "fix"):
        idents = [_ident(r) for _ in range(4)]
        lines = _code(r, word, n, idents)
        if kind == "rename":
            old, new = idents[0], _ident(r)
            while new in idents:
                new = _ident(r)
            if not any(old in ln.split() or f"{old}(" in ln or f"({old}" in ln for ln in lines):
                lines[0] = f"{r.choice(grammar.KEYWORDS)} {old} = {idents[1]}"
            pat = re.compile(rf"\b{re.escape(old)}\b")
            return CopyDoc(kind, instr.format(old=old, new=new), "\n".join(lines),
                           "\n".join(pat.sub(new, ln) for ln in lines), instr)
        i = r.randrange(len(lines))
        kw = lines[i].replace("(", " ").replace(".", " ").split()
        kw = next(w for w in kw if w in grammar.KEYWORDS)
        j = r.randrange(len(kw) - 1)
        typo = kw[:j] + kw[j + 1] + kw[j] + kw[j + 2:]
        if typo == kw:
            typo = kw[:-1]
        broken = list(lines)
        broken[i] = lines[i].replace(kw, typo, 1)
        return CopyDoc(kind, instr, "\n".join(broken), "\n".join(lines), instr)
    fields = r.sample(["name", "city", "code", "count", "item", "year"], r.randint(3, 4))
    recs = _records(r, word, names, max(2, n // 2), fields)
    text = "\n\n".join("\n".join(f"{k}: {v}" for k, v in rec.items()) for rec in recs)
    if kind == "csv":
        order = r.sample(fields, len(fields))
        return CopyDoc(kind, instr.format(fields=", ".join(order)), text,
                       "\n".join(",".join(rec[k] for k in order) for rec in recs), instr)
    fname = r.choice(fields)
    return CopyDoc(kind, instr.format(field=fname), text, "\n".join(rec[fname] for rec in recs), instr)


# ----------------------------------------------------------------------------- the document stream

#: document kinds of the pretraining stream and their probabilities. "twin": an answerable problem with a
#: trap's surface (as often as traps); traps are "trap" plus a third of "lookup", about 7% of documents.
MIX = {"problem": 0.45, "trap": 0.05, "twin": 0.05, "lookup": 0.07, "copy": 0.25, "drill": 0.09, "chat": 0.04}
LOOKUP_TRAP_SHARE = 1 / 3


def drill(r: random.Random) -> tuple[str, str]:
    """An arithmetic fact in the forms and ranges the step chains use: ``("47 + 29 =", " 76")``."""
    k = r.randrange(5)
    if k == 0:
        a, b = r.randint(1, 99), r.randint(1, 99)
        return f"{a} + {b} =", f" {a + b}"
    if k == 1:
        a = r.randint(2, 199)
        b = r.randint(1, a - 1)
        return f"{a} - {b} =", f" {a - b}"
    if k == 2:
        a, b = r.randint(2, 12), r.randint(2, 60)
        return f"{a} * {b} =", f" {a * b}"
    if k == 3:
        b, q = r.randint(2, 15), r.randint(2, 15)
        return f"{b * q} / {b} =", f" {q}"
    pct = r.choice([10, 20, 25, 50, 75])
    a = _pct_base(r, pct, 20, 200)
    return f"{a} * {pct} / 100 =", f" {a * pct // 100}"


def math_pair(doc: MathDoc) -> tuple[str, str]:
    return schema.math_prompt(doc.question), schema.math_completion(doc.steps, doc.answer)


def copy_pair(doc: CopyDoc) -> tuple[str, str]:
    return schema.copy_prompt(doc.instruction, doc.input), doc.output


_MIX_KINDS, _MIX_CUM = list(MIX), list(accumulate(MIX.values()))


def document(r: random.Random, split: str = "train", pseudo_words: float = 0.0) -> tuple[str, str, str]:
    """One pretraining document ``(kind, prompt, completion)``; the completion ends with EOS.
    ``pseudo_words``: the share of a copy task's free words that are made up (:func:`render_copy`)."""
    kind = r.choices(_MIX_KINDS, cum_weights=_MIX_CUM)[0]
    if kind == "problem":
        p, c = math_pair(render_problem(r, split))
    elif kind == "trap":
        p, c = math_pair(render_problem(r, split, trap=r.choice(TRAPS)))
    elif kind == "twin":
        p, c = math_pair(render_problem(r, split, decoy=r.choice(DECOYS)))
    elif kind == "lookup":
        trap = r.choice(["vague", "missing"]) if r.random() < LOOKUP_TRAP_SHARE else None
        p, c = math_pair(render_lookup(r, split, trap=trap))
    elif kind == "copy":
        p, c = copy_pair(render_copy(r, split, pseudo_words=pseudo_words))
    elif kind == "drill":
        pairs = [drill(r) for _ in range(8)]
        p, c = "".join(a + b + "\n" for a, b in pairs[:-1]) + pairs[-1][0], pairs[-1][1]
    else:  # a problem in the chat format, so the chat markers are not new to SFT
        d = render_problem(r, split)
        user = d.question
        reply = schema.math_completion(d.steps, d.answer).strip()
        p = (f"{schema.IM_START}system\n{schema.MATH_SYSTEM}{schema.IM_END}\n{schema.IM_START}user\n{user}"
             f"{schema.IM_END}\n{schema.IM_START}assistant\n")
        c = reply + schema.IM_END + "\n"
    return kind, p, c + schema.EOS


def stream(seed: int, split: str = "train", pseudo_words: float = 0.0):
    """Endless pretraining documents ``(kind, prompt, completion)`` of ``split``, deterministic in ``seed``
    (and ``pseudo_words``, the share of copy tasks' free words made up; train split only)."""
    r = random.Random(check_seed(seed) * 1_000_003 + SPLITS.index(check_split(split)))
    pseudo_words = check_pseudo_words(pseudo_words, split)
    while True:
        yield document(r, split, pseudo_words)
