"""The shipped `edit` workload: a document in the prompt, and an answer asked to repeat it whole with one small
change (rename a name, change a value, fix a word). Most of such an answer copies its input, as code edits,
agent tool loops and quoting do, so speculative decoding's drafts (prompt lookup above all) are accepted far
more often than in free chat. The documents are written here from templates, nothing copied from elsewhere.

    python -m scenarios.make_edit_set scenarios/data/edit.jsonl   # writes it again, the same bytes
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

SEED = 20261206
NUM_LINES = 24
SYSTEM = "You edit documents. Answer with the whole document, changed as asked, and nothing else."
NOUNS = ["order", "invoice", "user", "session", "ticket", "report", "payment", "shipment", "account", "device"]
VERBS = ["load", "save", "check", "send", "close", "merge", "price", "count", "renew", "sync"]
SERVICES = ["billing", "search", "gateway", "auth", "inventory", "mailer", "scheduler", "ledger"]


def python_function(rng: random.Random) -> tuple[str, str, str]:
    noun, verb = rng.choice(NOUNS), rng.choice(VERBS)
    other = rng.choice([n for n in NOUNS if n != noun])
    limit = rng.randrange(2, 20)
    text = (f"def {verb}_{noun}s({noun}s, limit={limit}):\n"
            f'    """{verb.capitalize()} up to limit {noun}s and return how many were done."""\n'
            f"    done = 0\n"
            f"    for {noun} in {noun}s:\n"
            f"        if done >= limit:\n"
            f"            break\n"
            f"        if {noun}.is_valid():\n"
            f"            {noun}.{verb}()\n"
            f"            done += 1\n"
            f"    return done\n")
    return "python", text, f"Rename the variable `{noun}` to `{other}` everywhere in this function."


def yaml_config(rng: random.Random) -> tuple[str, str, str]:
    service = rng.choice(SERVICES)
    replicas, port, timeout = rng.randrange(2, 9), rng.randrange(8000, 9000), rng.choice([5, 10, 30, 60])
    text = (f"service: {service}\n"
            f"replicas: {replicas}\n"
            f"port: {port}\n"
            f"health_check:\n"
            f"  path: /healthz\n"
            f"  interval_s: 10\n"
            f"  timeout_s: {timeout}\n"
            f"resources:\n"
            f"  cpu: 2\n"
            f"  memory_gib: 4\n"
            f"log_level: info\n")
    return "yaml", text, f"Change replicas to {replicas + 2} and leave everything else as it is."


def prose_note(rng: random.Random) -> tuple[str, str, str]:
    service = rng.choice(SERVICES)
    day = rng.choice(["Monday", "Tuesday", "Wednesday", "Thursday"])
    hour = rng.randrange(6, 11)
    text = (f"The {service} service will be moved to the new cluster on {day} at {hour}:00. During the move, "
            f"requests may take longer than usual, and a few may fail and need to be sent again. The team will "
            f"watch the error rate and the latency for an hour after the move. If either is worse than before, "
            f"the service will be moved back, and a new date will be announced here. Questions go to the "
            f"{service} channel.\n")
    new_day = rng.choice([d for d in ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday") if d != day])
    return "text", text, f"The move is now on {new_day}: change the day, and nothing else."


KINDS = (python_function, yaml_config, prose_note)


def entries(seed: int = SEED, count: int = NUM_LINES) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    lines = []
    for index in range(count):
        language, text, ask = KINDS[index % len(KINDS)](rng)
        user = f"{ask}\n\n```{language}\n{text}```"
        # room for the whole document again, fenced: a little more than the prompt's own length in tokens
        lines.append({"messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}],
                      "max_tokens": 256})
    return lines


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit("usage: python -m scenarios.make_edit_set OUT.jsonl")
    out = Path(sys.argv[1])
    out.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in entries()), encoding="utf-8")
    print(f"wrote {NUM_LINES} edit requests to {out}")


if __name__ == "__main__":
    main()
