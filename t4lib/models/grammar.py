"""The sentence grammar of the procedural corpus: each slot's sentences are composed from parts
(an optional opener, a subject phrasing, one of several synonymous verb phrases, the order of
quantity and object, an optional trailing adjunct), so a slot has hundreds of productions; a
stable hash of each production splits them into those training may use and those kept for
held-out evaluation.

A slot is a list of patterns in a small notation:

* ``(a|b|c)``: one of the alternatives; ``[a|b]``: optional (absent two times in three);
* ``<name>``: a shared part (``PARTS``: openers, sequencing words, question lead-ins);
* ``!`` at the start of a pattern or of an alternative: every production through it is held out.

A production is one fully expanded frame (placeholders kept, e.g. ``"Then {A} buys {n} more
{items}."``). It is held out when it goes through a ``!`` part or when the sha1 of its text
falls in one bucket of five (:func:`heldout_by_hash`), so the held-out split holds both unseen
combinations of seen parts and whole patterns and verb phrases never seen in training; the
vocabulary is shared (a held-out frame's words all occur in training frames), so a held-out
frame is a new arrangement, not new language. A frame text is one production however many
paths spell it, so no held-out frame equals a training frame. Placeholders:

* ``{A}``, ``{B}``, ``{C}``: people (from the name pools of :mod:`t4lib.models.pools`);
* ``{items}``/``{item}``: a countable thing, plural/singular; ``{cont}``/``{conts}``: a container;
* ``{n}``, ``{m}``, ``{g}``, ``{per}``, ``{t}``, ``{k}``: counts (digits, or number words);
* ``{pct}``: a percentage (``25%``/``25 percent``), ``{f}``: a fraction ``p/q``;
* ``{money}``: an amount of dollars; ``{adj}``, ``{whole}``, ``{act}``, ``{unit}``... as named.

In a trap (a problem whose needed quantity is not given), one count is rendered as a vague
word ("several"), or its sentence is dropped, or contradicted (:mod:`t4lib.models.procedural`).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from functools import lru_cache
from itertools import accumulate

#: one production in HELDOUT_BUCKETS is held out by hash (on top of the ``!`` parts)
HELDOUT_BUCKETS = 5
#: probability that an optional ``[...]`` part is absent
ABSENT = 2 / 3

OPENERS = ["On Monday,", "In the morning,", "At the fair,", "One day,", "Today,", "At school,", "In the afternoon,",
           "During the holiday,", "This week,", "After lunch,", "On Saturday,", "In the evening,"]

#: synonymous words and phrases shared by many slots (referenced as ``<name>``)
SYNONYMS: dict[str, list[str]] = {
    "then": ["Then", "Next,", "Later,", "After that,", "Afterwards,", "Soon after,", "After a while,"],
    "ask": ["So,", "Now,", "Then,", "Well,", "Tell me,", "Given all this,", "With that,"],
    "solve": ["Find", "Work out", "Compute", "Give"],
    "total": ["in total", "altogether", "in all"],
    "evenly": ["equally", "evenly", "fairly"],
    "friends": ["friends", "classmates", "neighbors", "cousins"],
    "more": ["more", "extra", "additional", "further"],
    "each": ["each", "every"],
    "now": ["now", "in the end", "at the end", "after all this"],
}

PARTS: dict[str, str] = {"when": "(" + "|".join(OPENERS) + ")",
                         **{k: "(" + "|".join(v) + ")" for k, v in SYNONYMS.items()}}


def _part_phrase(q: str) -> list[str]:
    """The patterns of "a part of the items has a property", for a percentage or a fraction ``q``."""
    return [
        f"[<when> ][exactly |only ]{q} of (the|these|{{A}}'s) {{items}} (are|turn out to be) {{adj}}.",
        f"Of (the|these|{{A}}'s) {{items}}, {q} (are|turn out to be) {{adj}}.",
        f"Among (the|these|{{A}}'s) {{items}}, {q} (are|!turn out to be) {{adj}}.",
        f"[<when> ]{{A}} (finds|notices|sees|!finds out) that {q} of (the|these) {{items}} are {{adj}}.",
        f"!It is noted that {q} of the {{items}} are {{adj}}.",
    ]


SLOTS: dict[str, list[str]] = {
    # ------------------------------------------------------------------ amounts held, gained, lost
    "have": [
        "[<when> ]{A} (has|owns|holds|keeps|has got|!possesses) {n} {items}"
        "[ (at home|in a {cont}|on a shelf|in the garden|in the kitchen|at school)].",
        "[<when> ](there are|you can find|one can count|you can see|!one can find) {n} {items} in {A}'s (room|{cont}|kitchen|garden).",
        "[<when> ]{A} (starts|begins|starts out|starts the day) with {n} {items}[ (at home|in a {cont}|on a shelf)].",
        "In {A}'s (room|{cont}|kitchen|garden|collection) there are {n} {items}.",
        "{A}'s {cont} (holds|contains|has) {n} {items}[ (at first|this morning|to begin with)].",
        "!The {cont} that belongs to {A} (contains|holds|has) {n} {items}.",
        "{A} (had|owned|kept|!collected) {n} {items} (this morning|at first|to begin with|at the start|last week).",
        "At first, {A} (had|owned|held) [a total of ]{n} {items}.",
    ],
    "gain": [
        "[<then> ]{B} (gives|hands|passes|!offers) {A} {n} <more> {items}[ (at the market|after lunch|at school|on the way home)].",
        "[<then> ]{B} (gives|hands|passes) {n} (more|extra|additional) {items} to {A}.",
        "[<then> ]{A} (buys|gets|finds|picks up|collects|wins|!purchases) {n} <more> {items}"
        "[ (at the market|at the fair|in a game|on the way home|after lunch)].",
        "[<then> ]{A} (receives|gets|!collects) {n} (more |extra |){items} from {B}.",
        "[<then> ]{n} (more|extra|new) {items} (are added to|go into|!end up in) {A}'s {cont}.",
        "!{B} adds {n} {items} to what {A} has.",
        "[<when> ]{A}'s (collection|{cont}) grows by {n} {items}.",
    ],
    "lose": [
        "[<then> ]{A} (gives|hands|passes|donates) {n} (of the |){items} to {B}.",
        "[<then> ]{A} (loses|sells|breaks|eats|uses up|throws away|gives away|!drops) {n} (of the |){items}"
        "[ (by mistake|on the way home|at the market|at school|after lunch)].",
        "[<then> ]{B} (takes|borrows|grabs|removes) {n} (of the |){items} from {A}.",
        "[(<then>|Sadly,) ]{n} of {A}'s {items} (break|go missing|get lost|are lost|!are given away).",
        "!Sadly, {n} of the {items} (go missing|break|get lost).",
    ],
    "q_now": [
        "[<ask> ]How many {items} does {A} (have|own|hold|!keep) (now|in the end|at the end|after that|after all this|at this point)?",
        "[<ask> ]How many {items} (are with|belong to|!remain with) {A} <now>?",
        "What is the number of {items} {A} (has|owns|holds) <now>?",
        "<solve> the number of {items} {A} (has|owns|holds) <now>.",
        "[<ask> ]How many {items} does {A} end up with?",
        "!With how many {items} does {A} end up?",
    ],
    # ------------------------------------------------------------------ groups, sharing
    "groups": [
        "[<when> ]{A} (has|fills|buys|packs|!carries) {g} {conts} with {per} {items} in <each> {cont}.",
        "[<when> ]{A} (has|owns|keeps) {g} {conts}, and <each> {cont} (holds|contains|has) {per} {items}.",
        "[<when> ]{A} (fills|packs) {g} {conts} with {per} {items} (each|apiece).",
        "(Each|Every one) of {A}'s {g} {conts} (contains|holds|has) {per} {items}.",
        "[<when> ]{A} (buys|gets) {g} {conts} of {items}. <each> {cont} (has|holds|contains) {per} {items}.",
        "[<when> ]{A} lines up {g} {conts}, putting {per} {items} in <each> one.",
        "!{A} packs {per} {items} into <each> one of {g} {conts}.",
    ],
    "q_total": [
        "[<ask> ]How many {items} (are there|does {A} have|does {A} own|are in the {conts}|are packed in the {conts}"
        "|!are in all the {conts}) <total>?",
        "[<ask> ]What is the total number of {items}[ in the {conts}]?",
        "<solve> the total number of {items}[ in the {conts}].",
        "[<ask> ]How many {items} is that <total>?",
        "!Altogether, how many {items} (are there|does {A} have)?",
    ],
    "q_handed_total": [
        "[<ask> ]How many {items} are (given out|handed out|shared out|needed|!given away) <total>?",
        "[<ask> ]How many {items} do the {people1} and the {people2} get (in total|altogether|together)?",
        "[<ask> ]What is the total number of {items} (given out|handed out|needed)?",
        "<solve> the total number of {items} (given out|handed out|needed).",
        "!Together, how many {items} do they all get?",
    ],
    "share": [
        "[<when> ]{A} (shares|splits|divides|!spreads) {n} {items} <evenly> (among|between) {g} <friends>.",
        "[<when> ]{n} {items} are (split|divided) (evenly|equally) into {g} {conts}.",
        "[<when> ]{n} {items} are shared (evenly|equally|fairly) between {g} {conts}.",
        "[<when> ]{A} divides {n} {items} into {g} equal (groups|parts|piles|shares).",
        "{A} has {n} {items} and puts the same number into each of {g} {conts}.",
        "[<when> ]{A} deals {n} {items} out (evenly|equally) to {g} (players|friends|people).",
        "!{A} hands out {n} {items}, the same number to each of {g} people.",
    ],
    "q_each": [
        "[<ask> ](How many|What number of) {items} (does each one get|go into each part|are in each group"
        "|does each share hold|does each part get|!end up in each part)?",
        "<solve> how many {items} each (one|part|share|group) gets.",
        "[<ask> ]What is the number of {items} in each (group|part|share)?",
        "[<ask> ]How many {items} (are there|end up) in each (group|part|share)?",
        "!Each (group|part|share) gets how many {items}?",
    ],
    "keep": [
        "[<when> ]{A} (keeps|saves|sets aside|puts aside|holds back|!puts away) {n} (of them|of the {items}|{items})"
        "[ (for later|for a friend|for the next day)].",
        "[First, ]{n} (of the |){items} are (kept|saved|set aside) (for later|for a friend|at home).",
        "!{n} of the {items} are put aside for later.",
    ],
    "share_rest": [
        "[<then> ]{A} (shares|splits|divides|spreads) (the rest|what is left|the remaining {items}|the leftover {items}) "
        "<evenly> (among|between) {g} <friends>.",
        "[<then> ](the rest are|what is left is|the remaining {items} are|!the leftover {items} are) (split|divided) "
        "(evenly|equally) into {g} {conts}.",
        "!What is left is handed out fairly to {g} people.",
    ],
    # ------------------------------------------------------------------ parts of a whole
    "part_pct": _part_phrase("{pct}") + ["!A share of {pct} of the {items} is {adj}."],
    "part_frac": _part_phrase("{f}") + ["!A fraction of {f} of the {items} is {adj}."],
    "q_adj": [
        "[<ask> ]How many {adj} {items} (are there|does {A} have|are in the group|!are among them)[ (in total|in all)]?",
        "[<ask> ]How many of (the|these) {items} (are|turn out to be) {adj}[ (in total|in all)]?",
        "<solve> (the number of {adj} {items}|how many {adj} {items} there are).",
        "[<ask> ]What is the (number|count) of {adj} {items}?",
        "!How many of them are {adj}?",
    ],
    # ------------------------------------------------------------------ prices
    "price": [
        "[<when> ](A|One) {item} (costs|sells for|is priced at|!goes for) {money}[ (at the shop|at the market|at the fair)].",
        "The price of (a|one) {item} is {money}[ (at the shop|at the market|at the fair)].",
        "[<when> ]{A} (sees|finds|spots) a {item} priced at {money}[ (at the shop|at the market|at the fair)].",
        "!At the shop, the price of one {item} is set at {money}.",
        "The shop (sells|offers) a {item} (for|at) {money}.",
    ],
    "discount": [
        "[<then> ](It|The {item}) is on sale (for|at) {pct} off[ (this week|today)].",
        "[<when> ]the (shop|seller|store|coupon) (takes|knocks) {pct} off the price[ of the {item}].",
        "There is a discount of {pct}[ (this week|today)].",
        "[(This week|Today), ]the price (drops|falls|goes down|is cut) by {pct}.",
        "!A coupon (removes|takes) {pct} of the price.",
    ],
    "q_price": [
        "[<ask> ]What is the (new|reduced|sale|final) price(, in dollars| in dollars)?",
        "[<ask> ]How many dollars does (it|the {item}) cost (now|after the discount|on sale|!after the cut)?",
        "[<ask> ]How many dollars does {A} (pay for it|pay for the {item}|spend on the {item}) (now|after the discount|on sale)?",
        "!After the discount, how many dollars is it?",
    ],
    "buy": [
        "[<when> ]{A} (buys|gets|orders|picks up|purchases|!picks) {n} {items} (at|for) {money} (each|apiece|per {item}|a piece).",
        "[<when> ]{A} pays {money} (for each|for every one) of {n} {items}.",
        "[<when> ]{A} (pays|is charged) {money} per {item} for {n} {items}.",
        "[<when> ]{A} (buys|gets|orders) {n} {items}, which cost {money} each.",
        "(Each|One) {item} costs {money}, and {A} (buys|gets|orders) {n} of them.",
        "!For {n} {items}, {A} is charged {money} each.",
    ],
    "money": [
        "[<when> ]{A} (has|carries|has saved|keeps) {money}[ (in a wallet|in a purse|in a {cont})].",
        "[<when> ]{A} (brings|takes|!carries) {money} (to the shop|to the market|to the fair).",
        "{A}'s budget is {money}[ (today|this week)].",
        "[<when> ]{A} (starts|goes shopping) with {money}.",
        "!{A}'s wallet holds {money}.",
    ],
    "q_spend": [
        "[<ask> ]How many dollars does {A} (spend|pay) (in all|in total|altogether|!for everything)[ (at the shop|on this)]?",
        "[<ask> ]What is the total cost(, in dollars| in dollars)?",
        "<solve> the total cost[ of everything] in dollars.",
        "[<ask> ]How much does {A} (spend|pay) <total>, in dollars?",
        "!In dollars, what does everything cost together?",
    ],
    "q_change": [
        "[<ask> ]How many dollars does {A} have (left|left over|remaining)[ (after shopping|now|in the end)]?",
        "[<ask> ]How much money (is left|remains|does {A} have left)(, in dollars| in dollars)?",
        "[<ask> ]How many dollars (remain|are left)[ (after shopping|now|in the end)]?",
        "!What is {A}'s change, in dollars?",
    ],
    # ------------------------------------------------------------------ rates
    "rate": [
        "[<when> ]{A} (|usually |always |!also ){act} (every|each|per|a) {unit}.",
        "(Every|Each|In one) {unit}, {A} (|usually |always ){act}.",
        "[On average, ]{A} {act} in (one|a single) {unit}.",
        "!In a single {unit}, {A} {act}.",
        "At a steady pace, {A} {act} (every|each) {unit}.",
    ],
    "duration": [
        "[<then> ]{A} (keeps this up|does this|keeps going|works like this|!goes on like this) for {t} {units}"
        "[ (in a row|without a break)].",
        "This (goes on|lasts|continues) for {t} {units}[ (in a row|without a break)].",
        "[In all, ]the (work|practice|job) (lasts|takes) {t} {units}[ (in a row|without a break)].",
        "!{A} continues for {t} {units} in a row.",
    ],
    "q_rate_total": [
        "[<ask> ]How many {thing} does {A} (manage|do|get through|!get done) <total>[ (in the end|over that time)]?",
        "[<ask> ]What is the total number of {thing}[ (done|in the end)]?",
        "[<ask> ]How many {thing} is that <total>?",
        "<solve> the total number of {thing}.",
        "!Over all that time, how many {thing} are there?",
    ],
    "goal": [
        "[<when> ]{A} (needs|wants|plans|hopes|!aims) (to reach|to get|to do) {n} {thing}( in total| altogether|).",
        "The goal is {n} {thing}[ in total].",
        "[<when> ]{A} (needs|aims for) {n} {thing}( in total| altogether|).",
        "!A total of {n} {thing} is needed.",
    ],
    "q_how_long": [
        "[<ask> ]How many {units} (does it take|does {A} need|will that take|will it take|!are needed)[ (in total|in all|to reach the goal)]?",
        "[<ask> ]For how many {units} (must|does) {A} (keep going|keep at it)?",
        "<solve> how many {units} {A} needs[ to reach the goal].",
        "[<ask> ]How long does it take, in {units}?",
        "!After how many {units} does {A} reach the goal?",
    ],
    # ------------------------------------------------------------------ fractions of a task
    "part_task": [
        "[<then> ]{A} (finishes|does|takes care of|works through|handles|!gets through) {f} of {whole}"
        "[ (in the morning|after lunch|on Monday|in the afternoon)].",
        "[<then> ]{f} of {whole} is (done|finished|handled|!completed) by {A}.",
        "!{A} gets {f} of {whole} done.",
    ],
    "q_task": [
        "[<ask> ]What fraction of {whole} (is done|is finished|have they done|did they do|!is complete) "
        "(in total|together|altogether)?",
        "[<ask> ]How much of {whole} is (done|finished|complete|completed)(, as a fraction| as a fraction)?",
        "!What part of {whole} is now done?",
    ],
    # ------------------------------------------------------------------ unknown number (a x + b = c)
    "linear": [
        "[<when> ]{A} thinks of a number, (multiplies it by|times it by) {k} and (adds|then adds) {n}. The result is {m}. "
        "(What is the number?|Find the number.|Which number was it?)",
        "When a number is multiplied by {k} and then {n} is added, (the result is|you get) {m}. "
        "(What is the number?|Find the number.)",
        "Solve for x: {k}x + {n} = {m}. (What is x?|Find x.)",
        "{k} times a number, plus {n}, (gives|is) {m}. (What is the number?|Find the number.|Which number was it?)",
        "If you multiply a number by {k} and add {n}, you get {m}. (What is the number?|Find the number.)",
        "!Add {n} to {k} times a number and you get {m}. What is that number?",
        "!If you take a number, times it by {k}, then add {n}, you get {m}. Which number was it?",
    ],
    # ------------------------------------------------------------------ two groups of people
    "two_counts": [
        "[<when> ]there are {n} {people1} and {m} {people2}[ (at the party|in the room|at the fair|on the bus)].",
        "[<when> ]{A} (invites|meets|brings along|!brings) {n} {people1} and {m} {people2}"
        "[ (to the party|at the fair|at school)].",
        "A (room|bus|team) holds {n} {people1} and {m} {people2}.",
        "!The group has {n} {people1} and {m} {people2} in it.",
    ],
    "each_gets": [
        "[<then> ](each of them|every person|everyone|each one) (gets|receives|is given|is handed) {k} {items}.",
        "[<then> ]{A} (gives|hands|passes) {k} {items} to (each one|every person|each of them|everyone).",
        "!{k} {items} go to every person.",
    ],
    # ------------------------------------------------------------------ comparing two people
    "compare_have": [
        "[<when> ]{B} (has|owns|holds|has only|possesses|!keeps) {m} {items}[ (at home|in a {cont}|on a shelf)].",
        "{B}, on the other hand, (has|holds|owns) {m} {items}.",
        "(Meanwhile,|But) {B} (has|owns|holds) {m} {items}.",
        "!{B} only has {m} {items}.",
    ],
    "q_more": [
        "[<ask> ]How many more {items} does {A} (have|own|hold) than {B}( does|)?",
        "[<ask> ]How many fewer {items} does {B} (have|own|hold) than {A}( does|)?",
        "[<ask> ]What is the difference between (their numbers of {items}|the two counts|!the counts of {items})?",
        "<solve> the difference between (their numbers of {items}|the two counts).",
        "[<ask> ]By how many {items} does {A} (beat|lead) {B}?",
        "!{A} has how many {items} more than {B}?",
    ],
    "times_as_many": [
        "[<when> ]{B} (has|owns|holds|collects) {k} times as many {items} as {A}( does| has|).",
        "{B}'s (number|count) of {items} is {k} times {A}'s.",
        "{B} has {k} times the number of {items} that {A} has.",
        "!Next to {A}, {B} has {k} times as many {items}.",
    ],
    "q_b": [
        "[<ask> ]How many {items} does {B} (have|own|hold)[ (then|in total|altogether)]?",
        "<solve> the number of {items} {B} (has|owns|holds).",
        "[<ask> ]What is {B}'s (number|count) of {items}[ (then|in total)]?",
        "!{B} has how many {items}?",
    ],
    # ------------------------------------------------------------------ reading one stated quantity
    "q_lookup": [
        "[<ask> ]How many {items} does {A} (have|own|hold)[ (in total|in all|at home)]?",
        "[<ask> ]What number of {items} belongs to {A}?",
        "[<ask> ]How many of the {items} (belong to|are with) {A}?",
        "(<solve>|Say) (the number of|how many) {items} {A} (has|owns|holds).",
        "!Which count of {items} is {A}'s?",
    ],
    # ------------------------------------------------------------------ a second statement of the starting amount:
    # the same number (answerable) or another one (a contradiction trap), in the same frames
    "restate": [
        "(Another|A second|An older|A later) (note|record|report|list) (says|shows|states) (that |){A} (started|began) "
        "with {n} {items}.",
        "{A} (also says|later says|!says again) (that |)there were {n} {items} at the start.",
        "(Elsewhere|In another place|On another page), it is (written|noted|said) that {A} (began|started) with {n} {items}.",
        "!A second record shows {n} {items} for {A} at the start.",
    ],
    # ------------------------------------------------------------------ sentences that carry no needed number
    "distract": [
        "[<when> ]{C} (has|owns|keeps|!collected) {m} {items2}[ (at home|in a {cont}|on a shelf)].",
        "{C} is {m} years old.",
        "The {cont} (is|measures) {m} (cm|inches) (wide|tall|long).",
        "{C} (lives|works|studies) in {city}[ (these days|now)].",
        "It is {m} degrees (outside|in {city})[ today].",
        "{C} (bought|collected) {m} {items2} (last year|last week|at the fair).",
        "[<when> ]the (drive|trip|walk|ride) to {city} takes {m} minutes.",
    ],
}

#: words a vague quantity is rendered with (a count the reader cannot use)
VAGUE = ["some", "several", "a few", "many", "a number of", "lots of", "a handful of", "plenty of"]

# ---------------------------------------------------------------------------- copy/edit task wording
# Each instruction states the transform exactly (which name becomes which, the prefix, the field order),
# so the output follows from input and instruction by copying.
_KEEP_REST = "[ (Keep|Leave) (everything else|the rest|every other line) (the same|unchanged).]"

COPY_INSTRUCTIONS: dict[str, list[str]] = {
    "copy": [
        "[Please ](copy|repeat|reproduce|rewrite) the (text|input|lines) (exactly|word for word|without changes|as it is).",
        "(Write|Give) the (text|input|lines) again (exactly|word for word|without any changes).",
        "(Copy|Repeat) (every|each) line of the (text|input)[ (exactly|word for word)].",
        "!Write the input lines again, unchanged.",
    ],
    "rename": [
        "[Please ](rename|change) {old} to {new} (everywhere|in every line|throughout the text)." + _KEEP_REST,
        "Replace (every|each) (occurrence of |){old} with {new}[ wherever it appears]." + _KEEP_REST,
        "Change the name {old} to {new}( in the text| in the code|)." + _KEEP_REST,
        "!Wherever {old} appears, write {new} instead.",
        "(Write|Copy) the (code|text) again, (with|using) {new} (in place of|instead of) {old}.",
    ],
    "bullets": [
        "(Put|Add|Write) (a dash and a space|'- ') (in front of|before|at the start of) (each|every) line." + _KEEP_REST,
        "Turn the lines into a list with '- ' (before|in front of) (each|every) line.",
        "Make (each|every) line a (bullet point|list item) starting with '- '.",
        "!Make every line a list item that begins with '- '.",
        "(Copy|Write) (each|every) line with '- ' in front of it.",
    ],
    "number": [
        "Number the lines starting from 1[, with the number and a period before (each|every) line]." + _KEEP_REST,
        "(Put|Write|Add) the line number and a period (before|in front of) (each|every) line[, starting from 1].",
        "Write (each|every) line with its number in front, like 1. and 2." + _KEEP_REST,
        "!Start each line with its number and a period, like 1. and 2.",
        "(Copy|Write) the lines again, (each|every) one after its number and a period[, starting from 1]." + _KEEP_REST,
    ],
    "csv": [
        "(Write|Put) (each|every) record (as|on) one comma-separated line[ (in this order|with the fields in this order)]: {fields}.",
        "(Turn|Make) (each|every) record (into|as) a CSV (row|line) with the fields {fields}[ in that order].",
        "Put (each|every) record on one line, values joined by commas in the order {fields}.",
        "!Convert the records to comma-separated lines in the order {fields}.",
        "(Write|Give) one line per record with the values of {fields}, separated by commas.",
        "[Please ](convert|turn) the records (into|to) CSV lines with the fields {fields}[ in that order]."
        "[ (Write one line per record.|Use one line for each record.)]",
    ],
    "extract": [
        "(List|Write|Give) the {field} (of|from) (each|every) record, one per line.",
        "[Please ](write|keep|list) only the {field} values, one (on each|per) line.[ (Leave out|Skip) the other fields.]",
        "(Extract|Copy) the {field} field from (each|every) record[, one per line].",
        "!Give the {field} of each record, each on its own line.",
    ],
    "fix": [
        "Fix the misspelled keyword in the code[ and write the code again]." + _KEEP_REST,
        "One keyword is (spelled wrong|misspelled). (Correct|Fix) it and write the code again." + _KEEP_REST,
        "[Please ](repair|fix) the typo in the code and keep everything else[ the same].",
        "!Correct the one misspelled keyword in this code.",
    ],
}

#: keywords of the code-like texts the "fix" tasks misspell one of
KEYWORDS = ["return", "while", "print", "import", "define", "select", "update", "delete", "begin",
            "until", "yield", "assert", "global", "lambda", "switch", "default", "static", "struct"]


# ---------------------------------------------------------------------------- expansion

def _parse(src: str, i: int = 0, stops: str = ""):
    """``src`` from ``i`` up to one of ``stops`` -> (node, index); a node is a string, a list (a sequence)
    or ``("alt", optional, [(held, node), ...])``."""
    seq, buf = [], []
    while i < len(src) and src[i] not in stops:
        c = src[i]
        if c in "([":
            close, alts = (")" if c == "(" else "]"), []
            i += 1
            while True:
                held = src[i] == "!"
                node, i = _parse(src, i + held, "|" + close)
                alts.append((held, node))
                i += 1
                if src[i - 1] == close:
                    break
            seq += ["".join(buf), ("alt", c == "[", alts)]
            buf = []
        elif c == "<":
            j = src.index(">", i)
            seq += ["".join(buf), _parse(PARTS[src[i + 1:j]])[0]]
            buf, i = [], j + 1
        else:
            buf.append(c)
            i += 1
    seq.append("".join(buf))
    return [x for x in seq if x != ""], i


def _expand(node) -> list[tuple[str, float, bool]]:
    """Every ``(text, probability, held)`` the node produces."""
    if isinstance(node, str):
        return [(node, 1.0, False)]
    if isinstance(node, list):
        out = [("", 1.0, False)]
        for part in node:
            sub = _expand(part)
            out = [(a + b, wa * wb, ha or hb) for a, wa, ha in out for b, wb, hb in sub]
        return out
    _, optional, alts = node
    share = (1 - ABSENT if optional else 1.0) / len(alts)
    out = [("", ABSENT, False)] if optional else []
    for held, sub in alts:
        out += [(t, w * share, h or held) for t, w, h in _expand(sub)]
    return out


def _tidy(text: str) -> str:
    """One space between words, none before punctuation, a capital at the start of each sentence and a
    lower-case word after an opener's comma (placeholders are left as they are)."""
    text = re.sub(r" +", " ", text).strip()
    text = re.sub(r" ([,.?:])", r"\1", text)
    text = re.sub(r", ([A-Z])(?=[a-z])", lambda m: ", " + m.group(1).lower(), text)
    text = re.sub(r"(^|(?<=[a-z}])[.?] )([a-z])", lambda m: m.group(1) + m.group(2).upper(), text)
    return text


def heldout_by_hash(frame: str) -> bool:
    """True for one frame in HELDOUT_BUCKETS: a stable sha1 of the frame text (not Python's salted hash)."""
    return hashlib.sha1(frame.encode()).digest()[0] % HELDOUT_BUCKETS == 0


@dataclass(frozen=True)
class Productions:
    """A slot's productions: ``train`` and ``heldout`` frames with cumulative sampling weights."""
    train: tuple[str, ...]
    heldout: tuple[str, ...]
    train_cum: tuple[float, ...]
    heldout_cum: tuple[float, ...]


def _table(slot: str) -> tuple[list[str], str]:
    table, key = (COPY_INSTRUCTIONS, slot[5:]) if slot.startswith("copy:") else (SLOTS, slot)
    if key not in table:
        raise ValueError(f"slot must be one of {sorted(table)}, got {key!r}")
    return table[key], key


@lru_cache(maxsize=None)
def productions(slot: str) -> Productions:
    """Every production of ``slot`` (``"copy:<kind>"`` for copy instructions), split into training and held-out.
    Each pattern is drawn equally often, and within it each alternative."""
    patterns, _ = _table(slot)
    frames: dict[str, list] = {}                 # frame -> [weight, every path held out]
    for pattern in patterns:
        held_pattern = pattern.startswith("!")
        for text, w, held in _expand(_parse(pattern[held_pattern:])[0]):
            entry = frames.setdefault(_tidy(text), [0.0, True])
            entry[0] += w / len(patterns)
            entry[1] = entry[1] and (held or held_pattern)
    train = [(f, w) for f, (w, held) in frames.items() if not held and not heldout_by_hash(f)]
    heldout = [(f, w) for f, (w, held) in frames.items() if held or heldout_by_hash(f)]
    if not train or not heldout:
        raise AssertionError(f"slot {slot!r} needs training and held-out productions")
    return Productions(tuple(f for f, _ in train), tuple(f for f, _ in heldout),
                       tuple(accumulate(w for _, w in train)), tuple(accumulate(w for _, w in heldout)))


SPLITS = ("train", "validation", "test")


def check_split(split) -> str:
    """``split`` if it is one of :data:`SPLITS` (exactly: ``"Train"`` is not ``"train"``), else a ValueError."""
    if not isinstance(split, str) or split not in SPLITS:
        raise ValueError(f"split must be one of {list(SPLITS)}, got {split!r}")
    return split


def variants(slot: str, split: str) -> tuple[str, ...]:
    """The productions of ``slot`` that ``split`` may use (``train``: training productions;
    ``validation``/``test``: held-out productions)."""
    check_split(split)
    p = productions(slot)
    return p.train if split == "train" else p.heldout


def sample(r, slot: str, split: str) -> str:
    """One production of ``slot`` for ``split``, drawn with the pattern weights."""
    check_split(split)
    p = productions(slot)
    if split == "train":
        return r.choices(p.train, cum_weights=p.train_cum)[0]
    return r.choices(p.heldout, cum_weights=p.heldout_cum)[0]


def all_slots() -> list[str]:
    """Every slot name: the sentence slots, then ``copy:<kind>`` for each copy instruction."""
    return list(SLOTS) + [f"copy:{k}" for k in COPY_INSTRUCTIONS]
