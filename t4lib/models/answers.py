"""Exact rational values of answer text, by a small grammar that runs no code.

Model output is untrusted input: answers and trace steps are parsed here, never
by ``eval``, ``sympify`` or ``nsimplify`` (which evaluate Python). The grammar
(whitespace between tokens is ignored)::

    expr    := term (("+" | "-") term)*
    term    := unary (("*" | "/") unary)*
    unary   := ("+" | "-") unary | power
    power   := percent (("**" | "^") unary)?       right-associative; -2**2 = -4, as in Python
    percent := atom "%"?                            12% = 3/25
    atom    := NUMBER | "(" expr ")"
    NUMBER  := ASCII digits, an optional "." and digits, an optional exponent e[+-]digits

Everything else (names, attribute access, calls, strings, Unicode digits,
``nan``/``inf``, ``//``, commas) is :class:`Unparseable`. Size limits keep every
parse fast whatever the input: the text's length, the digits of one literal, the
nesting depth, the size of an exponent and the bits of every intermediate value.
"""
from __future__ import annotations

from fractions import Fraction

#: longest text parsed (a trace's compute line fits many times over)
MAX_CHARS = 1000
#: most digits in one numeric literal (integer and fraction parts together)
MAX_DIGITS = 100
#: deepest nesting of parentheses, signs and powers
MAX_DEPTH = 50
#: largest |exponent| of a power or of a literal's e-notation
MAX_EXPONENT = 1000
#: most bits in the numerator or denominator of any intermediate value
MAX_BITS = 4096

_DIGITS = frozenset("0123456789")
_SPACE = frozenset(" \t\r\n")
_OPS = ("**", "+", "-", "*", "/", "^", "%", "(", ")")


class Unparseable(ValueError):
    """Text that is no bounded exact rational expression; the message says why."""


def _tokens(text: str) -> list:
    """Numbers (as Fractions) and operator strings; Unparseable on any other character."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c in _SPACE:
            i += 1
        elif c in _DIGITS or (c == "." and i + 1 < n and text[i + 1] in _DIGITS):
            i = _number(text, i, out)
        else:
            op = next((o for o in _OPS if text.startswith(o, i)), None)
            if op is None:
                raise Unparseable(f"unexpected character {c!r} at {i}")
            out.append(op)
            i += len(op)
    return out


def _number(text: str, i: int, out: list) -> int:
    """Append the literal starting at ``i``; return the index after it."""
    n, j = len(text), i
    while j < n and text[j] in _DIGITS:
        j += 1
    whole, frac = text[i:j], ""
    if j < n and text[j] == ".":
        k = j + 1
        while k < n and text[k] in _DIGITS:
            k += 1
        frac, j = text[j + 1:k], k
    if len(whole) + len(frac) > MAX_DIGITS:
        raise Unparseable(f"a literal at {i} has more than {MAX_DIGITS} digits")
    value = Fraction(int(whole or "0") * 10 ** len(frac) + int(frac or "0"), 10 ** len(frac))
    if j < n and text[j] in "eE":
        k = j + 1 + (j + 1 < n and text[j + 1] in "+-")
        m = k
        while m < n and text[m] in _DIGITS:
            m += 1
        if m == k:
            raise Unparseable(f"e-notation without digits at {j}")
        if m - k > 4 or int(text[k:m]) > MAX_EXPONENT:
            raise Unparseable(f"exponent at {j} exceeds {MAX_EXPONENT}")
        e = int(text[k:m]) * (-1 if text[j + 1] == "-" else 1)
        value = value * Fraction(10) ** e
        j = m
    out.append(_bounded(value))
    return j


def _bounded(v: Fraction) -> Fraction:
    if v.numerator.bit_length() > MAX_BITS or v.denominator.bit_length() > MAX_BITS:
        raise Unparseable(f"a value exceeds {MAX_BITS} bits")
    return v


class _Parser:
    def __init__(self, toks: list):
        self.toks, self.i, self.depth = toks, 0, 0

    def peek(self):
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self):
        t = self.peek()
        self.i += 1
        return t

    def enter(self):
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Unparseable(f"nested deeper than {MAX_DEPTH}")

    def expr(self) -> Fraction:
        v = self.term()
        while self.peek() in ("+", "-"):
            op, w = self.take(), self.term()
            v = _bounded(v + w if op == "+" else v - w)
        return v

    def term(self) -> Fraction:
        v = self.unary()
        while self.peek() in ("*", "/"):
            op, w = self.take(), self.unary()
            if op == "/" and w == 0:
                raise Unparseable("division by zero")
            v = _bounded(v * w if op == "*" else v / w)
        return v

    def unary(self) -> Fraction:
        if self.peek() in ("+", "-"):
            self.enter()
            sign = self.take()
            v = self.unary()
            self.depth -= 1
            return -v if sign == "-" else v
        return self.power()

    def power(self) -> Fraction:
        base = self.percent()
        if self.peek() not in ("**", "^"):
            return base
        self.take()
        self.enter()
        e = self.unary()
        self.depth -= 1
        if e.denominator != 1:
            raise Unparseable(f"exponent {e} is not an integer")
        e = e.numerator
        if abs(e) > MAX_EXPONENT:
            raise Unparseable(f"exponent {e} exceeds {MAX_EXPONENT}")
        if base == 0 and e < 0:
            raise Unparseable("division by zero")
        size = max(base.numerator.bit_length(), base.denominator.bit_length())
        if size > 1 and (size - 1) * abs(e) > MAX_BITS:
            raise Unparseable(f"a power exceeds {MAX_BITS} bits")
        return _bounded(base ** e)

    def percent(self) -> Fraction:
        v = self.atom()
        if self.peek() == "%":
            self.take()
            v = v / 100
        return v

    def atom(self) -> Fraction:
        t = self.take()
        if isinstance(t, Fraction):
            return t
        if t == "(":
            self.enter()
            v = self.expr()
            if self.take() != ")":
                raise Unparseable("unbalanced parentheses")
            self.depth -= 1
            return v
        raise Unparseable("expected a number or '('" + ("" if t is None else f", got {t!r}"))


def parse_rational(text) -> Fraction:
    """The exact value of ``text`` (module docstring grammar); :class:`Unparseable` otherwise."""
    if not isinstance(text, str):
        raise Unparseable(f"answer must be a string, got {type(text).__name__}")
    if len(text) > MAX_CHARS:
        raise Unparseable(f"longer than {MAX_CHARS} characters ({len(text)})")
    p = _Parser(_tokens(text))
    if p.peek() is None:
        raise Unparseable("empty")
    v = p.expr()
    if p.peek() is not None:
        raise Unparseable(f"unexpected {p.peek()!r} after a complete expression")
    return v


def rational_or_none(text) -> Fraction | None:
    """:func:`parse_rational`, or None where the text does not parse."""
    try:
        return parse_rational(text)
    except Unparseable:
        return None
