"""The mined cases (cases/train.yaml) as a library of solved threads: for a paste, the known case whose paste reads
most like it, by TF-IDF cosine over words and identifiers. Doctor uses it two ways:

- where no rule reads a paste, the nearest case's thread, its cause and the fix it accepted are shown as a pointer,
  never as the likely cause (as a reading it named the right family 12 times in 49 on unseen pastes);
- where rules did read it, a close enough case is shown as a pointer (a thread that solved something like it).

Why a hand-written TF-IDF: the library is a few hundred short pastes and the query one paste, so thirty lines of
Counter arithmetic do in milliseconds what scikit-learn's vectoriser would do at the cost of a heavy dependency of
`doctor` (which must run on a machine whose torch, and so much else, is broken).

Measured before it was built (rules as of 61a1b1a, library = batches 1-4, queries = batch 5's 136 threads at first
contact): the rules were silent on 62; the nearest case named the right family for 18 of them and the right family
and fix for 8. Only held-out-free cases are in the library: a held-out case (thread number divisible by 5, not yet
spent) is never read, so a held-out score stays a score on unseen threads.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from typing import Optional

from steadytune.doctor.case_files import Case, load_cases

# below this, the nearest case is no better than a random one of its family (batch 5 vs batches 1-4: silent pastes
# scored under 0.1 had no right reading); the pointer beside a rule's reading asks for more
LIKELY_SIMILARITY = 0.1
POINTER_SIMILARITY = 0.35
# a word in under this share of the cases is telling (a tool, a symbol, a library); one shared makes a likeness more
# than common words ("AttributeError: module ... has no attribute" alone matched another package's case). Measured on
# batches 5 and 6 against the rounds before each: it drops 19 nearest cases, 16 of them of the wrong family.
RARE_SHARE = 0.03
# the head and the tail of a long log: its facts are at the start and its errors at the end
MAX_CHARS = 100_000

_TOKEN = re.compile(r"gfx[0-9a-f]+|[a-z_][a-z0-9_.\-]+")
_CJK_RUN = re.compile(r"[\u4e00-\u9fff]+")    # Chinese has no spaces: a run is read as its character pairs
_STOP = frozenset("the and for with that this not are was but from have has you can when all any its into out use "
                  "used it is in on of to be an as at by or if so no do my me we i".split())


def _tokens(text: str) -> list[str]:
    if len(text) > MAX_CHARS:
        text = text[: MAX_CHARS // 2] + "\n" + text[-MAX_CHARS // 2:]
    words = [w.strip(".-") for w in _TOKEN.findall(text.lower()) if w not in _STOP]
    for run in _CJK_RUN.findall(text):
        words += [run[i:i + 2] for i in range(len(run) - 1)] or [run]
    return words


@dataclass(frozen=True)
class Similar:
    case: Case
    score: float        # cosine similarity, 0..1
    rare_shared: int = 0    # the telling words (RARE_SHARE) both pastes have

    @property
    def likely(self) -> bool:
        """Close enough, on telling words, to give a reading where no rule gave one."""
        return self.score >= LIKELY_SIMILARITY and self.rare_shared > 0

    def line(self) -> str:
        when = f", {self.case.date}" if self.case.date else ""
        return f"{self.case.source} ({self.case.tool}{when}; similarity {self.score:.2f})"


class Library:
    """Cases as TF-IDF vectors (sublinear term frequency, smoothed idf, unit length)."""

    def __init__(self, cases: list[Case]):
        self.cases = cases
        docs = [Counter(_tokens(c.paste)) for c in cases]
        counts = Counter(w for doc in docs for w in doc)
        self.idf = {w: math.log((len(cases) + 1) / (n + 1)) + 1 for w, n in counts.items()}
        self.rare = {w for w, n in counts.items() if n <= max(2.0, RARE_SHARE * len(cases))}
        # a word no case has weighs as the rarest: it matches nothing, but a paste of many such words is unlike them all
        self.unseen_idf = math.log(len(cases) + 1) + 1
        self.vectors = [self._vector(doc) for doc in docs]

    def _vector(self, counts: Counter) -> dict[str, float]:
        weights = {w: (1 + math.log(n)) * self.idf.get(w, self.unseen_idf) for w, n in counts.items()}
        norm = math.sqrt(sum(x * x for x in weights.values())) or 1.0
        return {w: x / norm for w, x in weights.items()}

    def nearest(self, text: str, exclude_source: Optional[str] = None) -> Optional[Similar]:
        query = self._vector(Counter(_tokens(text)))
        if not query:
            return None
        best, best_vector = None, {}
        for case, vector in zip(self.cases, self.vectors):
            if case.source == exclude_source:
                continue
            score = sum(weight * vector.get(w, 0.0) for w, weight in query.items())
            if score > 0 and (best is None or score > best.score):
                best, best_vector = Similar(case, score), vector
        if best is None:
            return None
        rare = sum(1 for w in query if w in best_vector and w in self.rare)
        return Similar(best.case, best.score, rare)


@lru_cache(maxsize=1)
def library() -> Library:
    """The training part only: a case the held-out rule still holds back is never a neighbour."""
    return Library([c for c in load_cases("train") if c.part == "train"])


def nearest_case(text: str, exclude_source: Optional[str] = None) -> Optional[Similar]:
    """The solved case that reads most like `text` (`exclude_source`: the case being scored, never its own neighbour)."""
    return library().nearest(text, exclude_source)
