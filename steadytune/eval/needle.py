"""Needle retrieval (`steadytune eval --needle`): can the model find one fact placed at a given depth of a long
context? The usual long-context check (needle in a haystack): a filler text of the asked length in tokens, one
sentence in it saying a city's secret number, at 0% (the start) to 100% (the end) of the text, then the question;
the greedy answer counts as found when it contains the number. Each (length, depth) cell is asked `trials` times with
other cities, numbers and filler orders (seeded), and scored as the share found.

The filler is this module's own bland sentences, shuffled per trial: nothing in it resembles the needle, so a model
that answers right read the needle. The prompt goes through the run's chat template as one user turn, exactly as
evaluation prompts do (data/encode.encode_classification_prompt).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Sequence

from steadytune.data.encode import encode_classification_prompt, encode_text
from steadytune.errors import UserError
from steadytune.eval.scoring import generate_texts

FILLER = (
    "The morning train left the valley station a few minutes late.",
    "Most of the orchard had been planted by the previous owners.",
    "A light rain fell on the harbour through the afternoon.",
    "The committee agreed to meet again after the spring holidays.",
    "Several of the older maps showed a road that no longer exists.",
    "The bakery on the corner opens before sunrise every weekday.",
    "Engineers inspected the bridge and found the cables in good order.",
    "Her grandfather kept a small boat moored below the cliffs.",
    "The library moved its archive to the basement last winter.",
    "Wind turbines on the ridge turned slowly in the evening air.",
    "The recipe calls for two cups of flour and a pinch of salt.",
    "A flock of geese crossed the lake just before noon.",
    "The museum extended its opening hours for the summer season.",
    "Farmers in the region switched to drought resistant wheat.",
    "The old lighthouse now serves as a small maritime museum.",
    "Students gathered in the courtyard to hear the announcement.",
    "The ferry schedule changes twice a year with the tides.",
    "A new footpath connects the village to the forest trail.",
    "The orchestra rehearsed the second movement three times.",
    "Repairs to the town hall roof were finished ahead of schedule.",
    "The garden was full of lavender and wild thyme in July.",
    "A market is held in the square on the first Saturday of each month.",
    "The mountain road is closed when snow falls above the pass.",
    "The river carries fine silt down from the northern hills.",
    "Volunteers painted the fence around the community garden.",
    "The observatory opens its telescope to visitors on clear nights.",
    "An early frost damaged part of the vineyard last year.",
    "The school library received a donation of atlases.",
    "Traffic slowed near the tunnel while the lights were replaced.",
    "The cooperative sells honey, cheese and dried apples.",
    "A narrow staircase leads up to the bell tower.",
    "The canal was widened to let larger barges pass.",
    "Children flew kites on the hill above the playing fields.",
    "The hotel kitchen serves breakfast until ten o'clock.",
    "The survey counted more birds than in any earlier year.",
    "A stone wall marks the edge of the old estate.",
)
CITIES = ("Aurelia", "Brennick", "Calloway", "Dunmore", "Estrava", "Falkmoor", "Glenharrow", "Havelin", "Istermere",
          "Jorvale", "Kestrin", "Lindqvar", "Morrowby", "Norhaven", "Oskarth", "Pellmont", "Quarrin", "Rosslyn")
NEEDLE = "The secret number of {city} is {number}."
QUESTION = "\n\nWhat is the secret number of {city}? Answer with the number only."
DEFAULT_DEPTHS = (0, 25, 50, 75, 100)


@dataclass
class NeedlePrompt:
    ids: list[int]
    answer: str
    length: int
    depth: int


def needle_prompt(tokenizer: Any, template: Any, length: int, depth: int, trial: int, seed: int = 0) -> NeedlePrompt:
    """One prompt of about `length` tokens (chat chrome included) with the needle at `depth` percent of its text."""
    rng = random.Random(f"{seed}:{length}:{depth}:{trial}")
    city, number = rng.choice(CITIES), str(rng.randrange(10_000, 100_000))
    needle = encode_text(tokenizer, " " + NEEDLE.format(city=city, number=number))
    question = encode_text(tokenizer, QUESTION.format(city=city))
    chrome = len(encode_classification_prompt(template, tokenizer, "{text}", "", 1 << 30, text_ids=[]))
    room = length - chrome - len(needle) - len(question)
    if room < 1:
        raise UserError(f"--needle-lengths {length}: too short to hold the needle and the question "
                        f"({chrome + len(needle) + len(question)} tokens)")
    sentences = [encode_text(tokenizer, " " + s) for s in FILLER]
    order = list(range(len(sentences)))
    haystack: list[list[int]] = []
    used = 0
    while used < room:
        rng.shuffle(order)
        for i in order:
            haystack.append(sentences[i][:room - used])
            used += len(haystack[-1])
            if used >= room:
                break
    bounds = [0]
    for part in haystack:
        bounds.append(bounds[-1] + len(part))
    cut = min(range(len(bounds)), key=lambda b: abs(bounds[b] - room * depth / 100))   # a sentence boundary
    text = [t for part in haystack[:cut] for t in part] + needle + [t for part in haystack[cut:] for t in part]
    ids = encode_classification_prompt(template, tokenizer, "{text}", "", 1 << 30, text_ids=text + question)
    return NeedlePrompt(ids, number, length, depth)


def evaluate_needle(model, tokenizer: Any, template: Any, lengths: Sequence[int], depths: Sequence[int] = DEFAULT_DEPTHS,
                    trials: int = 3, seed: int = 0, batch_size: int = 1, max_new_tokens: int = 12) -> dict:
    """Share of needles found per length and depth -> {"lengths", "depths", "trials", "found": {length: {depth:
    share}}, "overall", "answers": [...]}."""
    prompts = [needle_prompt(tokenizer, template, length, depth, trial, seed)
               for length in lengths for depth in depths for trial in range(trials)]
    texts = generate_texts(model, tokenizer, [p.ids for p in prompts], max_new_tokens, batch_size=batch_size,
                           stop_token_ids=template.stop_token_ids())
    found: dict[int, dict[int, float]] = {length: {depth: 0.0 for depth in depths} for length in lengths}
    answers = []
    for prompt, text in zip(prompts, texts):
        hit = prompt.answer in text
        found[prompt.length][prompt.depth] += hit / trials
        answers.append({"length": prompt.length, "depth": prompt.depth, "tokens": len(prompt.ids),
                        "expected": prompt.answer, "answer": text.strip(), "found": hit})
    overall = sum(a["found"] for a in answers) / max(len(answers), 1)
    return {"lengths": list(lengths), "depths": list(depths), "trials": trials,
            "found": {str(k): {str(d): round(v, 4) for d, v in row.items()} for k, row in found.items()},
            "overall": round(overall, 4), "answers": answers}


def format_needle(results: dict) -> str:
    """The grid as a table: a row per length, a column per depth."""
    depths = results["depths"]
    lines = ["needle found (share of trials)", "length    " + "".join(f"{d:>7}%" for d in depths)]
    for length in results["lengths"]:
        row = results["found"][str(length)]
        lines.append(f"{length:<10,}" + "".join(f"{row[str(d)]:>8.2f}" for d in depths))
    lines.append(f"overall {results['overall']:.3f} over {len(results['answers'])} prompts")
    return "\n".join(lines)


# How far past its window a model is asked: up to here the grid shows where retrieval fails; far past it, a prompt
# of millions of tokens ran for hours (or until memory ran out) to measure positions no layer has seen.
MAX_PAST_WINDOW = 4


def check_lengths(lengths: Sequence[int], window: int | None) -> None:
    """Lengths past MAX_PAST_WINDOW times the model's window are refused, naming the longest one accepted."""
    if not window:
        return
    beyond = [n for n in lengths if n > MAX_PAST_WINDOW * window]
    if beyond:
        raise UserError(f"--needle-lengths {max(beyond):,}: more than {MAX_PAST_WINDOW}x this model's window of "
                        f"{window:,} positions (a prompt that long would run for hours to measure positions no layer "
                        f"has seen); use lengths up to {MAX_PAST_WINDOW * window:,}")


def parse_ints(text: str, name: str, low: int = 0, high: int | None = None) -> list[int]:
    try:
        values = [int(x.replace("_", "")) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UserError(f"{name}: expected a comma list of whole numbers, got {text!r}") from None
    bad = [v for v in values if v < low or (high is not None and v > high)]
    if not values or bad:
        bound = f"in {low}..{high}" if high is not None else f"at least {low}"
        raise UserError(f"{name}: values must be {bound} (got {text!r})")
    return values
