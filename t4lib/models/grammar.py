"""The sentence grammar of the procedural corpus: clause variants per slot, split into the
productions training may use and those kept for held-out evaluation.

Every slot lists ``(train variants, held-out variants)``. A training document is rendered
from training variants only; validation and test documents from held-out variants only, so a
model is judged on sentence frames it never saw (the words inside them, verbs and nouns, are
shared vocabulary: a frame is new, the language is not). Placeholders:

* ``{A}``, ``{B}``, ``{C}``: people (from the name pools of :mod:`t4lib.models.pools`);
* ``{items}``/``{item}``: a countable thing, plural/singular; ``{cont}``/``{conts}``: a container;
* ``{n}``, ``{m}``, ``{g}``, ``{per}``, ``{t}``, ``{k}``: counts (digits, or number words);
* ``{pct}``: a percentage (``25%``/``25 percent``), ``{f}``/``{f2}``: a fraction ``p/q``;
* ``{money}``/``{money2}``: an amount of dollars; ``{adj}``, ``{whole}``, ``{act}``, ``{unit}``... as named.

In a trap (a problem whose needed quantity is not given), one count is rendered as a vague
word ("several"), or its sentence is dropped, or contradicted (:mod:`t4lib.models.procedural`).
"""

from __future__ import annotations

SLOTS: dict[str, tuple[list[str], list[str]]] = {
    # ------------------------------------------------------------------ amounts held, gained, lost
    "have": ([
        "{A} has {n} {items}.",
        "{A} owns {n} {items}.",
        "There are {n} {items} in {A}'s {cont}.",
        "{A} starts with {n} {items}.",
        "{A} is keeping {n} {items} at home.",
        "In {A}'s collection there are {n} {items}.",
        "{A} had {n} {items} this morning.",
    ], [
        "{A} currently holds {n} {items}.",
        "At first, {A} had a total of {n} {items}.",
        "The {cont} that belongs to {A} contains {n} {items}.",
    ]),
    "gain": ([
        "{B} gives {A} {n} more {items}.",
        "Then {A} buys {n} more {items}.",
        "{A} finds another {n} {items}.",
        "Later, {A} receives {n} {items} from {B}.",
        "{A} gets {n} extra {items} at the market.",
        "After that, {B} hands {A} {n} more {items}.",
        "{A} wins {n} more {items} in a game.",
    ], [
        "Next, {A} picks up {n} additional {items}.",
        "{B} adds {n} {items} to what {A} has.",
        "On the way home, {A} collects {n} further {items}.",
    ]),
    "lose": ([
        "{A} gives {n} {items} to {B}.",
        "Then {A} loses {n} of the {items}.",
        "{A} sells {n} {items}.",
        "{B} takes {n} {items} from {A}.",
        "Later, {n} of {A}'s {items} break.",
        "{A} uses up {n} of them.",
        "{A} throws away {n} old {items}.",
    ], [
        "Afterwards, {A} donates {n} {items} to {B}.",
        "{A} hands {n} of the {items} over to {B}.",
        "Sadly, {n} of the {items} go missing.",
    ]),
    "q_now": ([
        "How many {items} does {A} have now?",
        "How many {items} does {A} have in the end?",
        "What is the number of {items} {A} has now?",
        "Find the number of {items} {A} has now.",
        "How many {items} are with {A} at the end?",
    ], [
        "How many {items} does {A} end up with?",
        "What number of {items} does {A} hold after all this?",
    ]),
    # ------------------------------------------------------------------ groups, sharing
    "groups": ([
        "{A} has {g} {conts} with {per} {items} in each {cont}.",
        "There are {g} {conts}, and each {cont} holds {per} {items}.",
        "{A} fills {g} {conts} with {per} {items} each.",
        "Each of {A}'s {g} {conts} contains {per} {items}.",
        "{A} buys {g} {conts} of {items}. Every {cont} has {per} {items}.",
        "{A} lines up {g} {conts}, putting {per} {items} in every one.",
    ], [
        "{A} packs {per} {items} into every one of {g} {conts}.",
        "In each of {g} {conts} {A} places {per} {items}.",
    ]),
    "q_total": ([
        "How many {items} are there in total?",
        "How many {items} does {A} have altogether?",
        "What is the total number of {items}?",
        "How many {items} is that in all?",
        "How many {items} are there altogether?",
    ], [
        "Altogether, how many {items} are there?",
        "Work out the total count of {items}.",
    ]),
    "share": ([
        "{A} shares {n} {items} equally among {g} friends.",
        "{n} {items} are split evenly into {g} {conts}.",
        "{A} divides {n} {items} into {g} equal groups.",
        "{A} has {n} {items} and puts the same number into each of {g} {conts}.",
        "{A} deals {n} {items} out evenly to {g} players.",
    ], [
        "{A} hands out {n} {items}, the same amount to each of {g} people.",
        "{n} {items} get shared out fairly between {g} {conts}.",
    ]),
    "q_each": ([
        "How many {items} does each one get?",
        "How many {items} go into each part?",
        "How many {items} are in each group?",
        "How many {items} is each share?",
    ], [
        "What number of {items} lands in each group?",
        "Each group receives how many {items}?",
    ]),
    "keep": ([
        "{A} keeps {n} of them.",
        "{A} puts {n} {items} aside.",
        "{n} of the {items} are kept for later.",
        "First {A} saves {n} {items} for a friend.",
    ], [
        "{A} holds back {n} {items}.",
        "{n} {items} stay in reserve.",
    ]),
    "share_rest": ([
        "{A} shares the rest equally among {g} friends.",
        "The rest are split evenly into {g} {conts}.",
        "The remaining {items} go into {g} equal groups.",
        "{A} divides what is left among {g} {conts}.",
    ], [
        "What remains is handed out fairly to {g} people.",
        "{A} spreads the leftover {items} evenly over {g} {conts}.",
    ]),
    # ------------------------------------------------------------------ parts of a whole
    "part_pct": ([
        "{pct} of the {items} are {adj}.",
        "Of these {items}, {pct} are {adj}.",
        "Exactly {pct} of them are {adj}.",
        "{pct} of {A}'s {items} are {adj}.",
    ], [
        "Among the {items}, {pct} turn out to be {adj}.",
        "A share of {pct} of the {items} is {adj}.",
    ]),
    "part_frac": ([
        "{f} of the {items} are {adj}.",
        "Of these {items}, {f} are {adj}.",
        "Exactly {f} of them are {adj}.",
        "{f} of {A}'s {items} are {adj}.",
    ], [
        "Among the {items}, {f} turn out to be {adj}.",
        "A fraction {f} of the {items} is {adj}.",
    ]),
    "q_adj": ([
        "How many {adj} {items} are there?",
        "How many of the {items} are {adj}?",
        "Find the number of {adj} {items}.",
        "How many {items} are {adj}?",
    ], [
        "What is the count of {adj} {items}?",
        "How many {adj} ones are among them?",
    ]),
    # ------------------------------------------------------------------ prices
    "price": ([
        "A {item} costs {money}.",
        "The price of a {item} is {money}.",
        "{A} sees a {item} priced at {money}.",
        "A {item} sells for {money}.",
    ], [
        "The tag on a {item} says {money}.",
        "One {item} is worth {money}.",
    ]),
    "discount": ([
        "It is on sale for {pct} off.",
        "The shop takes {pct} off the price.",
        "There is a {pct} discount.",
        "This week the price drops by {pct}.",
    ], [
        "A coupon removes {pct} of the price.",
        "The price is cut by {pct}.",
    ]),
    "q_price": ([
        "What is the new price in dollars?",
        "How many dollars does it cost after the discount?",
        "What does {A} pay for it, in dollars?",
    ], [
        "What is the reduced price, in dollars?",
        "After the cut, how many dollars is it?",
    ]),
    "buy": ([
        "{A} buys {n} {items} at {money} each.",
        "{A} gets {n} {items} for {money} apiece.",
        "{A} orders {n} {items} costing {money} each.",
        "{A} pays {money} for each of {n} {items}.",
    ], [
        "{A} picks {n} {items} priced {money} a piece.",
        "For {n} {items}, {A} is charged {money} per {item}.",
    ]),
    "money": ([
        "{A} has {money}.",
        "{A} brings {money} to the shop.",
        "{A} starts with {money}.",
    ], [
        "{A} carries {money} in a wallet.",
        "{A}'s budget is {money}.",
    ]),
    "q_spend": ([
        "How many dollars does {A} spend?",
        "What is the total cost in dollars?",
        "How much does {A} pay in all, in dollars?",
    ], [
        "In dollars, what does everything cost together?",
        "How many dollars go on the shopping?",
    ]),
    "q_change": ([
        "How many dollars does {A} have left?",
        "How much money is left, in dollars?",
        "How many dollars remain?",
    ], [
        "What is {A}'s change, in dollars?",
        "In dollars, what is left over?",
    ]),
    # ------------------------------------------------------------------ rates
    "rate": ([
        "{A} {act} every {unit}.",
        "{A} {act} each {unit}.",
        "Every {unit}, {A} {act}.",
        "{A} {act} per {unit}.",
    ], [
        "At a steady pace, {A} {act} in one {unit}.",
        "In a single {unit}, {A} {act}.",
    ]),
    "duration": ([
        "{A} keeps this up for {t} {units}.",
        "This goes on for {t} {units}.",
        "{A} does this for {t} {units}.",
    ], [
        "The work lasts {t} {units}.",
        "{A} continues for {t} {units} in a row.",
    ]),
    "q_rate_total": ([
        "How many {thing} does {A} manage in total?",
        "What is the total number of {thing}?",
        "How many {thing} is that altogether?",
    ], [
        "Over the whole time, how many {thing} are there?",
        "Work out the total {thing}.",
    ]),
    "goal": ([
        "{A} needs {n} {thing} in total.",
        "The goal is {n} {thing}.",
        "{A} wants to reach {n} {thing}.",
    ], [
        "{A} aims for {n} {thing} altogether.",
        "A total of {n} {thing} is needed.",
    ]),
    "q_how_long": ([
        "How many {units} does it take?",
        "How many {units} does {A} need?",
        "For how many {units} must {A} keep going?",
    ], [
        "After how many {units} is the goal reached?",
        "How many {units} will that take?",
    ]),
    # ------------------------------------------------------------------ fractions of a task
    "part_task": ([
        "{A} finishes {f} of {whole}.",
        "{A} does {f} of {whole}.",
        "{A} takes care of {f} of {whole}.",
        "Then {A} cleans {f} of {whole}.",
    ], [
        "{A} completes {f} of {whole}.",
        "{A} covers {f} of {whole}.",
    ]),
    "q_task": ([
        "What fraction of {whole} is done in total?",
        "What fraction of {whole} did they do together?",
        "How much of {whole} is finished, as a fraction?",
    ], [
        "Together, what fraction of {whole} have they done?",
        "What part of {whole} is now done?",
    ]),
    # ------------------------------------------------------------------ unknown number (a x + b = c)
    "linear": ([
        "{A} thinks of a number, multiplies it by {k} and adds {n}. The result is {m}. What is the number?",
        "When a number is multiplied by {k} and then {n} is added, the result is {m}. Find the number.",
        "Solve for x: {k}x + {n} = {m}. What is x?",
        "{k} times a number, plus {n}, gives {m}. What is the number?",
    ], [
        "If you take a number, times it by {k}, then add {n}, you get {m}. Which number was it?",
        "Adding {n} to {k} times a number gives {m}. What is that number?",
    ]),
    # ------------------------------------------------------------------ two groups of people
    "two_counts": ([
        "There are {n} {people1} and {m} {people2}.",
        "{A} invites {n} {people1} and {m} {people2}.",
        "A room holds {n} {people1} and {m} {people2}.",
    ], [
        "{n} {people1} and {m} {people2} come along.",
        "The group is made of {n} {people1} plus {m} {people2}.",
    ]),
    "each_gets": ([
        "Each of them gets {k} {items}.",
        "Every person receives {k} {items}.",
        "{A} gives {k} {items} to each one.",
    ], [
        "Everyone is handed {k} {items}.",
        "{k} {items} go to every person.",
    ]),
    # ------------------------------------------------------------------ comparing two people
    "compare_have": ([
        "{B} has {m} {items}.",
        "{B} owns {m} {items}.",
        "{B} has only {m} {items}.",
    ], [
        "{B}, on the other hand, holds {m} {items}.",
        "Meanwhile {B} keeps {m} {items}.",
    ]),
    "q_more": ([
        "How many more {items} does {A} have than {B}?",
        "How many fewer {items} does {B} have than {A}?",
        "What is the difference between their numbers of {items}?",
    ], [
        "By how many {items} does {A} lead {B}?",
        "{A} has how many {items} more than {B}?",
    ]),
    "times_as_many": ([
        "{B} has {k} times as many {items} as {A}.",
        "{B} owns {k} times as many.",
        "{B}'s number of {items} is {k} times {A}'s.",
    ], [
        "{B} has {k} times the amount that {A} has.",
        "The count for {B} is {k} times bigger than for {A}.",
    ]),
    "q_b": ([
        "How many {items} does {B} have?",
        "How many {items} does {B} own?",
        "Find the number of {items} {B} has.",
    ], [
        "What is {B}'s count of {items}?",
        "{B} has how many {items}?",
    ]),
    # ------------------------------------------------------------------ reading one stated quantity
    "q_lookup": ([
        "How many {items} does {A} have?",
        "What number of {items} belongs to {A}?",
        "How many {items} are with {A}?",
    ], [
        "Which count of {items} is {A}'s?",
        "Say how many {items} {A} has.",
    ]),
    # ------------------------------------------------------------------ contradiction of a stated amount
    "contradict": ([
        "But another note says {A} started with {n} {items}.",
        "{A} also says there were {n} {items} at the start.",
        "Elsewhere it is written that {A} began with {n} {items}.",
    ], [
        "Yet a second record lists {n} {items} for {A} at first.",
        "A later report insists {A} first had {n} {items}.",
    ]),
    # ------------------------------------------------------------------ sentences that carry no needed number
    "distract": ([
        "{C} has {m} {items2}.",
        "{C} is {m} years old.",
        "The {cont} is {m} cm wide.",
        "{C} lives in {city}.",
        "It is {m} degrees outside.",
        "{C} bought {m} {items2} last year.",
    ], [
        "{C} keeps {m} {items2} in a drawer.",
        "The walk to {city} takes {m} minutes.",
    ]),
}

#: words a vague quantity is rendered with (a count the reader cannot use)
VAGUE = ["some", "several", "a few", "many", "a number of", "lots of", "a handful of", "plenty of"]

# ---------------------------------------------------------------------------- copy/edit task wording

COPY_INSTRUCTIONS: dict[str, tuple[list[str], list[str]]] = {
    "copy": ([
        "Copy the text exactly.",
        "Repeat the input word for word.",
        "Write the input again without changes.",
    ], [
        "Reproduce the text below exactly as it is.",
    ]),
    "rename": ([
        "Rename {old} to {new} everywhere.",
        "Replace every {old} with {new}.",
        "Change the name {old} to {new} in the text.",
    ], [
        "Wherever {old} appears, write {new} instead.",
    ]),
    "bullets": ([
        "Put a dash in front of each line.",
        "Turn the lines into a list with '- ' before each line.",
        "Make each line a bullet point starting with '- '.",
    ], [
        "Format every line as a list item beginning with a dash.",
    ]),
    "number": ([
        "Number the lines starting from 1.",
        "Put the line number and a period before each line.",
        "Write each line with its number in front, like 1. and 2.",
    ], [
        "Prefix each line with its position: 1., 2., 3. and so on.",
    ]),
    "csv": ([
        "Write each record as one comma-separated line: {fields}.",
        "Turn every record into a CSV row with the fields {fields}.",
        "Put each record on one line, values joined by commas in the order {fields}.",
    ], [
        "Convert the records to comma-separated lines ordered as {fields}.",
    ]),
    "extract": ([
        "List the {field} of every record, one per line.",
        "Write only the {field} values, one on each line.",
        "Extract the {field} field from each record.",
    ], [
        "Give the {field} of each record, each on its own line.",
    ]),
    "fix": ([
        "Fix the misspelled keyword in the code.",
        "One keyword is spelled wrong. Correct it and write the code again.",
        "Repair the typo in the code and keep everything else.",
    ], [
        "Correct the single spelling mistake in this code.",
    ]),
}

#: keywords of the code-like texts the "fix" tasks misspell one of
KEYWORDS = ["return", "while", "print", "import", "define", "select", "update", "delete", "begin",
            "until", "yield", "assert", "global", "lambda", "switch", "default", "static", "struct"]


def variants(slot: str, split: str) -> list[str]:
    """The clause variants of ``slot`` that ``split`` may use (``train``: training productions;
    ``validation``/``test``: held-out productions)."""
    table = COPY_INSTRUCTIONS if slot.startswith("copy:") else SLOTS
    key = slot.split(":", 1)[1] if slot.startswith("copy:") else slot
    if key not in table:
        raise ValueError(f"slot must be one of {sorted(table)}, got {key!r}")
    train, held = table[key]
    return train if split == "train" else held


# ---------------------------------------------------------------------------- shared surface variation
# Words inside any frame may be swapped for a synonym and a statement may open with a time phrase, in
# every split: the vocabulary is shared, the frames are not, so held-out frames meet known words in
# new arrangements rather than unknown words.
SYNONYMS: dict[str, list[str]] = {
    "gives": ["gives", "hands", "passes", "offers"],
    "buys": ["buys", "purchases", "gets"],
    "more": ["more", "extra", "additional", "further"],
    "extra": ["extra", "more", "additional"],
    "additional": ["additional", "more", "extra"],
    "finds": ["finds", "discovers", "comes across"],
    "loses": ["loses", "misplaces"],
    "sells": ["sells", "trades away"],
    "takes": ["takes", "grabs", "removes"],
    "has": ["has", "owns", "holds"],
    "owns": ["owns", "has", "possesses"],
    "receives": ["receives", "gets", "is given"],
    "shares": ["shares", "splits", "divides"],
    "equally": ["equally", "evenly", "fairly"],
    "evenly": ["evenly", "equally"],
    "friends": ["friends", "classmates", "neighbors", "cousins"],
    "total": ["total", "sum"],
    "altogether": ["altogether", "in all", "in total"],
    "Later,": ["Later,", "Afterwards,", "After a while,"],
    "Then": ["Then", "Next", "After that"],
    "keeps": ["keeps", "saves", "sets aside"],
    "costs": ["costs", "is priced at"],
    "each": ["each", "apiece"],
    "Find": ["Find", "Work out", "Compute"],
    "wants": ["wants", "hopes", "plans"],
}
OPENERS = ["On Monday,", "In the morning,", "Last week,", "Today,", "At the fair,", "During the holiday,",
           "Early on,", "One day,", "In the afternoon,", "At school,"]
