"""schemathesis hooks for test_schemathesis.py (loaded by schemathesis through $SCHEMATHESIS_HOOKS, in its own
environment; never imported by the tests themselves).

Most generated bodies name a model at random, which the server answers 404 before reading anything else; three
in four of those whose `model` is a string are sent with the served model's name instead, so generated fields
reach the parsing and the engine behind it. Which ones is decided by the body's checksum: the same seed sends
the same requests.
"""

import json
import os
import zlib

import schemathesis

SERVED_MODEL = os.environ.get("BENCH_SCHEMATHESIS_MODEL", "dummy:tiny")


@schemathesis.hook
def map_case(context, case):  # noqa: ANN001, ANN201
    """Every phase's cases (a `map_body` hook would miss the coverage phase's, most of them)."""
    body = case.body
    if isinstance(body, dict) and isinstance(body.get("model"), str):
        checksum = zlib.crc32(json.dumps(body, sort_keys=True, default=str).encode())
        if checksum % 4:
            case.body = {**body, "model": SERVED_MODEL}
    return case
