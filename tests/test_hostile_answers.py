"""Model output is untrusted input: hostile answer text through every public parsing path runs no code,
finishes fast, and never raises out of a reward function; the answer formats the data use still parse."""
import subprocess
import sys
import threading
import time
from fractions import Fraction
from pathlib import Path

import pytest

from t4lib.models import answers, schema
from t4lib.train import data, evaluate as ev, rewards as R

CANARY = Path("/tmp/t4lib_hostile_canary")   # every code-running payload would create this file
MODULE_CANARY = "T4LIB_HOSTILE_RAN"           # ... or set this attribute on the sys module

_CODE = [
    f"__import__('os').system('touch {CANARY}')",
    f"__import__('pathlib').Path('{CANARY}').touch()",
    f"open('{CANARY}', 'w').write('x')",
    f"exec(\"open('{CANARY}', 'w')\")",
    f"eval(\"open('{CANARY}', 'w')\")",
    f"(lambda: open('{CANARY}', 'w'))()",
    f"[open('{CANARY}', 'w') for _ in (1,)]",
    f"__import__('sys').{MODULE_CANARY} = 1",
    f"setattr(__import__('sys'), '{MODULE_CANARY}', 1)",
    "exec(chr(105)+chr(109)+chr(112)+chr(111)+chr(114)+chr(116)+chr(32)+chr(111)+chr(115))",
    "().__class__.__base__.__subclasses__()",
    "import os", "from os import system", "os.system('id')", "globals()", "breakpoint()",
    "Symbol('x')", "S(1)/2", "Rational(1, 2)", "Integer(7)", "sympify('7')", "lambda x: x", "1 if 1 else 2",
    "f'{1}'", "b'1'", "'7'", '"7"', "[7]", "{7}", "(7,)", "7; import os", "7 # comment", "7\n__import__('os')",
]
_ATTRIBUTES = ["x.y", "a.b.c", "(1).real", "1 .real", "7 .numerator", "x.__class__", "1..2", "..", "."]
_HUGE = [
    "9^9^9", "9**9**9", "10**10**10", "10^10^10", "2**2**2**2**2**2", "9**9**9**9", "(10**100)**(10**100)",
    "10^(10^10)", "2^{2^{100}}", "10**-10**10", "-10**10**10", "(9**9)**(9**9)", "2**4097", "3**3000",
    "1e999999999", "1e-999999999", "1E99999", "2**(1/2)", "0**-1", "0^-5", "(2**4000)*(2**4000)", "9" * 5000,
    "1" * 101, "0." + "1" * 200, "1/" + "7" * 150, "100000!", "99999999!", "\\Gamma(10^9)", "\\binom{10^9}{5}",
    "10^{10^{10}}", "9^{9^{9}}", "2^{2^{2^{2^{2}}}}", "\\sum_{i=1}^{10^9} i", "\\prod_{i=1}^{10^6} i",
    "\\boxed{9^{9^{9}}}", "$10^{10^{10}}$", "factorial(10**6)", "gamma(10**9)",
    # one small power that SymPy expands into a binomial number of terms
    "$(a+b+c+d+f+g+h)^{99}$", "$(\\sqrt{2}+\\sqrt{3}+\\sqrt{5}+\\sqrt{7})^{99}$", "(x+y+z)^{50}", "\\boxed{(a+b+c)^{40}}",
    "$\\sqrt{2}^{99}$", "(1+\\sqrt{2})^{99}",
]
_NESTING = ["(" * n + "1" + ")" * n for n in (60, 1000, 5000, 100_000)] + \
    ["-" * n + "1" for n in (60, 10_000)] + ["+-" * 5000 + "1", "(" * 10_000, ")" * 10_000, "{" * 5000 + "}" * 5000,
                                            "\\frac{" * 500 + "1" + "}{2}" * 500]
_LONG = ["1+" * 100_000 + "1", "1" * 1_000_000, "a" * 1_000_000, "7 " * 300_000, "<answer>" * 10_000,
         "The answer is " * 50_000, "1/" * 100_000 + "1", "7" + " " * 1_000_000]
_ODD = [
    "٣", "३", "²", "①", "１２", "𝟏𝟐", "Ⅻ", "12\u200b", "\u22123", "७/८", "3\u20444",
    "nan", "NaN", "inf", "-inf", "Infinity", "oo", "zoo", "I", "E", "pi", "sqrt(2)", "1/0", "0/0", "3/0",
    "True", "None", "", " ", "\x00", "7\x00", "%", "12%%", "//", "7//2", "7 % 3", "@", "1@2", "~1", "1j",
    "1_000", "0x10", "0b11", "1,000", "1 000", "$7$", "\\frac{1}{2}", "\\boxed{7}", "<answer>", "</answer>",
    "<abstain>", "<|endoftext|>", "\\", "\\\\", "\\x", "{}", "e5", "1e", "1e+", "-", "+", "*", "**", "^",
]
HOSTILE = _CODE + _ATTRIBUTES + _HUGE + _NESTING + _LONG + _ODD
WRAPS = [lambda s: s, lambda s: f"7 + {s}", lambda s: f"({s})", lambda s: f" {s} "]
CASES = [(f"{i:03d}-{j}", w(s)) for i, s in enumerate(HOSTILE) for j, w in enumerate(WRAPS)]

TRACE = schema.render_trace("Given: 3 boxes of 2. Find: how many?", ["Multiply."], ["3 * 2 = 6"], ["6 / 2 = 3"], "6")


def test_at_least_200_hostile_strings():
    assert len(CASES) >= 200 and len(set(s for _, s in CASES)) >= 200


@pytest.fixture(scope="module")
def golds():
    return [ev.parse_gold(g) for g in ("7", "3/4", "$\\frac{\\sqrt{2}}{2}$")]


def timed(fn, *args, **kw):
    """``fn(*args, **kw)``, which must return or raise within a second."""
    t0 = time.perf_counter()
    try:
        return fn(*args, **kw)
    finally:
        assert time.perf_counter() - t0 < 1.0, f"{fn.__name__} took {time.perf_counter() - t0:.2f}s"


def _paths(s: str, golds) -> None:
    """Every public parsing path on ``s``: each returns, or raises the ValueError its contract names."""
    with pytest.raises(ValueError):  # nothing hostile is a rational (a plain number may be: see the positives)
        timed(schema.normalize_answer, s)
    assert timed(schema.extract_answer, s) in (None, "abstain")
    plain = f" 3 * 2 = 6. The answer is {s}."
    assert timed(schema.extract_answer, plain) is None or isinstance(schema.extract_answer(plain), str)
    traces = [TRACE.replace("<answer>6</answer>", f"<answer>{s}</answer>"),
              TRACE.replace("3 * 2 = 6", f"{s} = 6"), TRACE.replace("6 / 2 = 3", f"{s} = 3"),
              TRACE.replace("3 * 2 = 6", f"3 * 2 = {s}")]
    for t in traces:
        with pytest.raises(ValueError):
            timed(schema.certify_trace, t, "6")
        p = timed(data.parse_completion, t)
        assert not p.valid or p.answer == "6"
        assert timed(ev.failure_kind, "3 boxes of 2", t) in ev.FAILURE_KINDS
    try:  # a step is stripped before it is read: "7" and a million spaces is the true step "7 = 7"
        assert timed(schema.check_identity, f"{s} = 7", "compute") == 7
    except ValueError:
        pass
    comps = [s, plain, *traces, [{"role": "assistant", "content": s}]]
    for fmt in R.FORMATS:
        for target in ("6", "7", schema.ABSTAIN_TAG):
            rs = timed(R.honesty_reward, comps, [target] * len(comps), fmt=fmt)
            assert all(r in R.REWARDS.values() for r in rs)
            assert all(timed(R.outcome, c, target, fmt) in R.REWARDS for c in comps)
        assert all(r in (0.0, R.FORMAT_BONUS) for r in timed(R.format_reward, comps, fmt=fmt))
        for c in comps:
            p = timed(R.predicted, c, fmt)
            assert p is None or isinstance(p, str)
            assert timed(R.is_formatted, c, fmt) in (True, False)
    for g in golds:
        assert timed(ev.is_correct, g, s) in (True, False)
        assert timed(ev.is_correct, g, traces[0]) is False
    try:
        timed(ev.parse_gold, s)
    except ValueError:
        pass
    recs = [dict(id=i, question="q", answer="6", structure="mul", n_steps=1) for i in range(len(traces) + 2)]
    for fmt in ev.FORMATS:
        rows = timed(ev.score, recs, [s, plain, *traces], fmt)
        assert all(r["correct"] in (True, False) for r in rows)


@pytest.fixture(scope="module", autouse=True)
def _no_canary():
    CANARY.unlink(missing_ok=True)
    yield
    assert not CANARY.exists(), "a hostile answer ran code (the canary file exists)"
    assert not hasattr(sys, MODULE_CANARY), "a hostile answer ran code (the module canary is set)"


@pytest.mark.parametrize("s", [s for _, s in CASES], ids=[i for i, _ in CASES])
def test_hostile_answer_runs_no_code_and_finishes(s, golds):
    _paths(s, golds)
    assert not CANARY.exists() and not hasattr(sys, MODULE_CANARY)


# A parser that hangs (SymPy on 9^9^9 computes the power in one C call that no signal interrupts) would hang
# the test above rather than fail it; in a child process under a wall-clock limit the hang is a failure.
HANG_PRONE = _HUGE + _NESTING + _LONG
CHILD = """
import sys, time
sys.path.insert(0, {tests!r})
import test_hostile_answers as t
golds = [t.ev.parse_gold(g) for g in ("7", "3/4", "$\\\\frac{{\\\\sqrt{{2}}}}{{2}}$")]
t0 = time.perf_counter()
for w in t.WRAPS[:2]:
    for s in t.HANG_PRONE:
        t._paths(w(s), golds)
print("done", len(t.HANG_PRONE) * 2, round(time.perf_counter() - t0, 1))
"""


def test_huge_and_deep_answers_finish_in_a_child_under_a_wall_clock_limit():
    code = CHILD.format(tests=str(Path(__file__).resolve().parent))
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=240)
    except subprocess.TimeoutExpired:
        pytest.fail("answer parsing hung on a huge or deeply nested answer (killed after 240 s)")
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith(f"done {len(HANG_PRONE) * 2}")
    assert not CANARY.exists()


def test_trainer_reward_functions_score_hostile_text():
    pytest.importorskip("torch")
    from t4lib.train.grpo import FormatReward, HonestyReward

    comps = [s for _, s in CASES]
    t0 = time.perf_counter()
    rs = HonestyReward()(comps, ["7"] * len(comps))
    fs = FormatReward()(comps)
    assert len(rs) == len(fs) == len(comps) and set(rs) <= set(R.REWARDS.values()) and set(fs) <= {0.0, R.FORMAT_BONUS}
    assert time.perf_counter() - t0 < len(comps) * 0.05
    assert not CANARY.exists()


def test_sympy_would_have_run_the_canary(tmp_path):
    """The canary is live: the same payload through SymPy's sympify (what parsed answers before) does write."""
    sympy = pytest.importorskip("sympy")
    target = tmp_path / "ran"
    try:
        sympy.sympify(f"__import__('pathlib').Path('{target}').touch()")
    except Exception:
        pass
    assert target.exists()
    assert schema.extract_answer(f"The answer is __import__('pathlib').Path('{target}2').touch()") is None
    assert not (tmp_path / "ran2").exists()


def test_unparseable_is_counted_in_training_data():
    ok = dict(question="3 boxes of 2?", trace=TRACE, answer="6")
    bad = [dict(ok, answer="__import__('os')"), dict(ok, answer="9^9^9"),
           dict(ok, trace=TRACE.replace("3 * 2 = 6", "2**99999 = 6"))]
    tok = pytest.importorskip("t4lib.models.tiny").load_tokenizer()
    ds, rep = data.traces_dataset(tok, [ok, *bad])
    assert len(ds) == 1 and rep.rejected == {"unparseable_gold": 2, "not_certified": 1}


def test_every_hostile_string_returns_within_two_cpu_seconds_off_the_main_thread(golds):
    """Off the main thread math-verify has no timeout (signal.alarm is the main thread's): the size and
    degree gate must bound every path by itself. CPU time of the thread, not wall time (the machine is shared)."""
    slow = []

    def work():
        for s in [s for _, s in CASES if len(s) < 1000]:
            t0 = time.thread_time()
            for g in golds:
                ev.is_correct(g, s)
            R.outcome(s, "7")
            R.outcome(f"\\boxed{{{s}}}", "7")
            if time.thread_time() - t0 > 2.0:
                slow.append((s[:60], round(time.thread_time() - t0, 2)))

    th = threading.Thread(target=work, daemon=True)
    th.start()
    th.join(600)
    assert not th.is_alive(), "answer checking hung off the main thread"
    assert not slow, slow


def test_is_correct_off_the_main_thread(golds):
    out = []
    th = threading.Thread(target=lambda: out.extend(ev.is_correct(g, p) for g, p in
                                                     zip(golds, ("7", "0.75", "$\\frac{1}{\\sqrt{2}}$"))))
    th.start()
    th.join(30)
    assert out == [True, True, True]


# ----------------------------------------------------------------------------- the formats still parse

@pytest.mark.parametrize("text, want", [
    ("17", "17"), ("-3/4", "-3/4"), ("02", "2"), ("6/8", "3/4"), ("0.5", "1/2"), ("-0.25", "-1/4"), (".5", "1/2"),
    ("12%", "3/25"), ("150%", "3/2"), (" 3 / 4 ", "3/4"), ("--3", "3"), ("+-3", "-3"), ("-(-3)", "3"),
    ("1e3", "1000"), ("2.5e-1", "1/4"), ("2^3", "8"), ("2**-2", "1/4"), ("-2**2", "-4"), ("2**3**2", "512"),
    ("(1+2)*3", "9"), ("1/2 + 1/3", "5/6"), ("7 - 10", "-3"), ("1" * 100, "1" * 100), ("2**1000", str(2 ** 1000)),
], ids=lambda v: v if len(v) < 20 else f"{v[:8]}...{len(v)}")
def test_answer_formats_parse(text, want):
    assert schema.normalize_answer(text) == want
    assert answers.parse_rational(text) == Fraction(want)


def test_values_that_are_numbers_normalize():
    assert schema.normalize_answer(Fraction(6, 8)) == "3/4" and schema.normalize_answer(5) == "5"
    assert schema.normalize_answer(0.5) == "1/2"
    with pytest.raises(ValueError, match="not an exact rational"):
        schema.normalize_answer(True)


def test_plain_answers_and_traces_still_read():
    assert schema.extract_answer(" 3 + 4 = 7. The answer is 7.") == "7"
    assert schema.extract_answer(" The answer is 6/8.") == "3/4"
    assert schema.extract_answer(" The answer is -12.") == "-12"
    assert schema.extract_answer(" The answer is 3/0.") is None
    assert schema.extract_answer(" The answer is ٣.") is None
    assert schema.certify_trace(TRACE, "6")["values"] == ["6"]
    frac = schema.render_trace("g", ["Add.", "Halve."], ["1/4 + 2/4 = 3/4", "(1/4 + 2/4) / 2 = 3/8"],
                               ["3/8 * 2 = 3/4"], "3/8")
    assert schema.certify_trace(frac, "6/16")["values"] == ["3/4", "3/8"]
    with pytest.raises(schema.FalseStepError):
        schema.check_identity("3 * 2 = 7", "compute")
    assert schema.check_identity("1.5 * 2 = 3", "compute") == 3
    assert R.outcome(TRACE.replace(">6<", ">12/2<"), "6", fmt="tags") == "correct"
    assert R.outcome(" The answer is 6.", "6") == "correct"
    assert data.parse_completion(TRACE).valid


@pytest.mark.parametrize("gold, pred, ok", [
    ("3/4", "6/8", True), ("3/4", "0.75", True), ("3/4", "75%", True), ("3/4", "$\\frac{3}{4}$", True),
    ("3/4", "1", False), ("72", "72", True), ("72", "\\boxed{72}", True), ("$\\frac{\\sqrt{2}}{2}$", "0.7", False),
    ("$\\frac{\\sqrt{2}}{2}$", "$\\frac{1}{\\sqrt{2}}$", True), ("7", None, False), ("7", "", False),
])
def test_is_correct(gold, pred, ok):
    assert ev.is_correct(ev.parse_gold(gold), pred) is ok


def test_math_verify_guard():
    assert ev.math_verify_safe("$\\frac{3}{4}$") and ev.math_verify_safe("2^{10}") and ev.math_verify_safe("x^2")
    for s in ("9^9^9", "2^{2^{10}}", "10^{100}", "100!", "\\Gamma(5)", "x" * 201, "١", "2**999", "1" * 101):
        assert not ev.math_verify_safe(s), s
