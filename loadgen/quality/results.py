"""One eval's answers, scored and compared: a run's accuracy overall, by grader and by category; two runs
compared item by item (the exact McNemar test on the items graded differently); and, without labels, how
often two runs gave the identical answer and the same first token.

Items are matched by their line in the eval (a record's `dataset_index`), so two runs compare only when
they asked the same file (its sha256)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from loadgen.quality.figures import accuracy, mcnemar_p
from loadgen.types import Accuracy, RequestRecord


@dataclass(frozen=True)
class EvalItem:
    line: int  # its line in the eval, as a record's dataset_index
    grader: str | None  # None: a prompt without an answer (compared by agreement only)
    category: str | None


@dataclass(frozen=True)
class ItemAnswer:
    """What one run answered to one item: only whether it was right, and fingerprints, never the text."""

    ok: bool
    correct: bool | None  # None: not graded (no answer to grade against, or the request failed)
    answer_sha256: str | None
    first_token_sha256: str | None


@dataclass(frozen=True)
class Scores:
    overall: Accuracy | None
    by_grader: dict[str, Accuracy]
    by_category: dict[str, Accuracy]
    num_items: int
    num_failed: int  # asked, but no answer came (an error or a timeout): not graded, and named

    def to_json(self) -> dict[str, Any]:
        head = asdict(self.overall) if self.overall else {"accuracy": None, "low": None, "high": None, "n": 0}
        return {**head, "by_grader": {k: asdict(v) for k, v in self.by_grader.items()},
                "by_category": {k: asdict(v) for k, v in self.by_category.items()},
                "num_items": self.num_items, "num_failed": self.num_failed}


@dataclass(frozen=True)
class Paired:
    """Two runs graded on the same items: how many they answered differently, and which way."""

    baseline: str
    other: str
    num_both: int  # items graded in both runs
    only_baseline_right: int
    only_other_right: int
    p_value: float  # exact McNemar, two-sided

    @property
    def num_differ(self) -> int:
        return self.only_baseline_right + self.only_other_right

    def sentence(self) -> str:
        if self.num_differ == 0:
            return f"{self.other} grades the same as {self.baseline} on all {self.num_both} items"
        return (f"{self.other} gets {self.num_differ} of {self.num_both} differently from {self.baseline}: "
                f"{self.only_baseline_right} of them wrong, {self.only_other_right} right; p = {self.p_value:.2g} "
                f"(exact McNemar)")

    def to_json(self) -> dict[str, Any]:
        return {"baseline": self.baseline, "other": self.other, "num_both": self.num_both,
                "num_differ": self.num_differ, "only_baseline_right": self.only_baseline_right,
                "only_other_right": self.only_other_right, "p_value": self.p_value}


@dataclass(frozen=True)
class Agreement:
    """Two runs on the same prompts, labels or not: the share of identical answers, and of the same first token
    where both servers returned logprobs."""

    reference: str
    other: str
    num_compared: int  # items both answered
    num_identical: int
    num_first_token_compared: int = 0
    num_first_token_same: int = 0

    @property
    def identical(self) -> Accuracy | None:
        return accuracy(self.num_identical, self.num_compared)

    @property
    def first_token(self) -> Accuracy | None:
        return accuracy(self.num_first_token_same, self.num_first_token_compared)

    def sentence(self) -> str:
        share = self.identical
        said = (f"{self.other} answers {self.num_identical} of {self.num_compared} identically to {self.reference}"
                + (f" ({share.accuracy:.0%}, 95 % interval {share.low:.0%}-{share.high:.0%})" if share else ""))
        token = self.first_token
        if token is None:
            return said + "; first tokens not compared (logprobs did not come from both; --logprobs asks for them)"
        return said + f"; the same first token on {self.num_first_token_same} of {self.num_first_token_compared}"

    def to_json(self) -> dict[str, Any]:
        identical, token = self.identical, self.first_token
        return {"reference": self.reference, "other": self.other, "num_compared": self.num_compared,
                "num_identical": self.num_identical, "identical": asdict(identical) if identical else None,
                "num_first_token_compared": self.num_first_token_compared,
                "num_first_token_same": self.num_first_token_same,
                "first_token": asdict(token) if token else None}


@dataclass
class RunAnswers:
    """A run's answers by eval line (its measured requests; a line asked twice keeps its first answer)."""

    name: str
    answers: dict[int, ItemAnswer] = field(default_factory=dict)

    @classmethod
    def of(cls, name: str, records: Iterable[RequestRecord]) -> RunAnswers:
        run = cls(name)
        for record in records:
            if record.is_warmup or record.dataset_index is None or record.dataset_index in run.answers:
                continue
            run.answers[record.dataset_index] = ItemAnswer(record.ok, record.correct, record.answer_sha256,
                                                           record.first_token_sha256)
        return run


def score(items: Iterable[EvalItem], run: RunAnswers) -> Scores:
    """Accuracy over the graded items a run answered, overall, by grader and by category."""
    right: dict[tuple[str, str], list[bool]] = defaultdict(list)
    overall: list[bool] = []
    num_items = num_failed = 0
    for item in items:
        num_items += 1
        answer = run.answers.get(item.line)
        if answer is None or not answer.ok:
            num_failed += 1
            continue
        if item.grader is None or answer.correct is None:
            continue
        overall.append(answer.correct)
        right[("grader", item.grader)].append(answer.correct)
        if item.category is not None:
            right[("category", item.category)].append(answer.correct)

    def group(kind: str) -> dict[str, Accuracy]:
        found = {name: accuracy(sum(got), len(got)) for (k, name), got in sorted(right.items()) if k == kind}
        return {name: acc for name, acc in found.items() if acc is not None}

    return Scores(accuracy(sum(overall), len(overall)), group("grader"), group("category"), num_items, num_failed)


def paired(baseline: RunAnswers, other: RunAnswers) -> Paired:
    """The items both runs graded, and which of them only one got right."""
    both = [(a.correct, b.correct) for line, a in baseline.answers.items()
            if (b := other.answers.get(line)) is not None and a.correct is not None and b.correct is not None]
    only_baseline = sum(1 for a, b in both if a and not b)
    only_other = sum(1 for a, b in both if b and not a)
    return Paired(baseline.name, other.name, len(both), only_baseline, only_other, mcnemar_p(only_baseline, only_other))


def agreement(reference: RunAnswers, other: RunAnswers) -> Agreement:
    """The items both runs answered: identical answers, and the same first token where both have it."""
    both = [(a, b) for line, a in reference.answers.items()
            if (b := other.answers.get(line)) is not None and a.answer_sha256 and b.answer_sha256]
    tokens = [(a.first_token_sha256, b.first_token_sha256) for a, b in both
              if a.first_token_sha256 and b.first_token_sha256]
    identical = sum(1 for a, b in both if a.answer_sha256 == b.answer_sha256)
    return Agreement(reference.name, other.name, len(both), identical, len(tokens), sum(1 for a, b in tokens if a == b))
