"""The shipped eval: graded questions this project writes itself, every answer computed, nothing copied from a
public benchmark. Kinds that a small model answers sometimes (a fact table, the day after a day, counting a
short list) beside kinds it rarely does (two-digit sums), so that weight formats can differ on them.

    python -m scenarios.make_quality_eval scenarios/data/quality.jsonl   # writes it again, the same bytes
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

SEED = 20261203
NUMBER_ONLY = "Answer with a number only."
ONE_WORD = "Answer with one word."
LETTER_ONLY = "Answer with the letter only."

CAPITALS = {
    "France": "Paris", "Germany": "Berlin", "Italy": "Rome", "Spain": "Madrid", "Portugal": "Lisbon",
    "Japan": "Tokyo", "China": "Beijing", "Russia": "Moscow", "Egypt": "Cairo", "Greece": "Athens",
    "Austria": "Vienna", "Poland": "Warsaw", "Norway": "Oslo", "Sweden": "Stockholm", "Finland": "Helsinki",
    "Denmark": "Copenhagen", "Ireland": "Dublin", "Hungary": "Budapest", "Kenya": "Nairobi", "Peru": "Lima",
    "Chile": "Santiago", "Argentina": "Buenos Aires", "Cuba": "Havana", "Thailand": "Bangkok",
    "South Korea": "Seoul", "Belgium": "Brussels", "the Netherlands": "Amsterdam", "Iran": "Tehran",
    "Iraq": "Baghdad", "Mexico": "Mexico City", "Canada": "Ottawa", "Australia": "Canberra",
    "Turkey": "Ankara", "Switzerland": "Bern", "Vietnam": "Hanoi", "Indonesia": "Jakarta",
    "the Philippines": "Manila", "Czechia": "Prague", "Romania": "Bucharest", "Ukraine": "Kyiv",
}
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
OPPOSITES = {"hot": "cold", "up": "down", "day": "night", "big": "small", "fast": "slow", "open": "closed",
             "wet": "dry", "full": "empty", "early": "late", "light": "dark", "hard": "soft", "old": "new"}
FRUITS = ["apple", "pear", "plum", "grape", "lemon", "cherry", "peach", "mango", "melon", "kiwi", "lime", "fig"]
CONVERSIONS = [("hours", "minutes", 60), ("minutes", "seconds", 60), ("kilometres", "metres", 1000),
               ("days", "hours", 24), ("weeks", "days", 7), ("dozens", "eggs", 12), ("metres", "centimetres", 100)]


def build_items(seed: int = SEED) -> list[dict[str, Any]]:
    """The eval's lines in order: each with its prompt, answer, grader and category."""
    rng = random.Random(seed)
    items: list[dict[str, Any]] = []
    asked: set[str] = set()
    for make, count in ((_capital, 40), (_next_day, 7), (_next_month, 12), (_opposite, 12),
                        (_small_sum, 50), (_two_digit_sum, 30), (_difference, 20), (_conversion, 35),
                        (_count_list, 40), (_largest, 30), (_alphabetical, 24)):
        for index in range(count):
            item = make(rng, index)
            while item["prompt"] in asked:  # a question drawn twice is drawn again: each one is asked once
                item = make(rng, index)
            asked.add(item["prompt"])
            items.append(item)
    return items


def _line(prompt: str, answer: str | list[str], grader: str, category: str, max_tokens: int = 16) -> dict[str, Any]:
    return {"prompt": prompt, "answer": answer, "grader": grader, "category": category, "max_tokens": max_tokens}


def _capital(rng: random.Random, index: int) -> dict[str, Any]:
    country, city = list(CAPITALS.items())[index]
    return _line(f"What is the capital of {country}? {ONE_WORD}", city, "contains", "facts")


def _next_day(rng: random.Random, index: int) -> dict[str, Any]:
    return _line(f"Which day of the week comes after {DAYS[index]}? {ONE_WORD}", DAYS[(index + 1) % 7],
                 "contains", "facts")


def _next_month(rng: random.Random, index: int) -> dict[str, Any]:
    return _line(f"Which month comes after {MONTHS[index]}? {ONE_WORD}", MONTHS[(index + 1) % 12], "contains",
                 "facts")


def _opposite(rng: random.Random, index: int) -> dict[str, Any]:
    word, opposite = list(OPPOSITES.items())[index]
    return _line(f"What is the opposite of '{word}'? {ONE_WORD}", opposite, "exact", "words")


def _small_sum(rng: random.Random, index: int) -> dict[str, Any]:
    a, b = rng.randint(1, 9), rng.randint(1, 9)
    return _line(f"What is {a} + {b}? {NUMBER_ONLY}", str(a + b), "number", "arithmetic")


def _two_digit_sum(rng: random.Random, index: int) -> dict[str, Any]:
    a, b = rng.randint(10, 99), rng.randint(10, 99)
    return _line(f"What is {a} + {b}? {NUMBER_ONLY}", str(a + b), "number", "arithmetic")


def _difference(rng: random.Random, index: int) -> dict[str, Any]:
    a = rng.randint(5, 20)
    b = rng.randint(1, a - 1)
    return _line(f"What is {a} - {b}? {NUMBER_ONLY}", str(a - b), "number", "arithmetic")


def _conversion(rng: random.Random, index: int) -> dict[str, Any]:
    unit, smaller, factor = CONVERSIONS[index % len(CONVERSIONS)]
    amount = rng.randint(2, 9)
    return _line(f"How many {smaller} are in {amount} {unit}? {NUMBER_ONLY}", str(amount * factor), "number",
                 "units")


def _count_list(rng: random.Random, index: int) -> dict[str, Any]:
    words = rng.sample(FRUITS, rng.randint(2, 7))
    return _line(f"How many fruits are in this list: {', '.join(words)}? {NUMBER_ONLY}", str(len(words)), "number",
                 "counting")


def _choices(options: list[str]) -> str:
    return " ".join(f"{'ABCD'[i]}) {option}" for i, option in enumerate(options))


def _largest(rng: random.Random, index: int) -> dict[str, Any]:
    numbers = rng.sample(range(1, 100), 4)
    letter = "ABCD"[numbers.index(max(numbers))]
    return _line(f"Which number is the largest? {_choices([str(n) for n in numbers])}. {LETTER_ONLY}", letter,
                 "choice", "ordering")


def _alphabetical(rng: random.Random, index: int) -> dict[str, Any]:
    words = rng.sample(FRUITS, 4)
    letter = "ABCD"[words.index(min(words))]
    return _line(f"Which word comes first in alphabetical order? {_choices(words)}. {LETTER_ONLY}", letter,
                 "choice", "ordering")


def write_eval(path: Path, seed: int = SEED) -> int:
    """Writes the eval as JSON lines; returns how many."""
    items = build_items(seed)
    path.write_text("".join(json.dumps(item, ensure_ascii=False) + "\n" for item in items), encoding="utf-8")
    return len(items)


if __name__ == "__main__":  # pragma: no cover - regenerates the shipped file
    print(write_eval(Path(sys.argv[1])), "items")
