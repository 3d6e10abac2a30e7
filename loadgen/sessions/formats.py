"""Session datasets -> a `SessionSet`: agent traces in the Weka / AgentX format, TraceLab rounds, or an
OpenTelemetry export of GenAI spans.

- weka: one JSON object per session (a directory of `.json` files, one JSON file holding one session or a
  list of them, or JSON lines): `id`, `block_size`, `requests`; a request has `t`, `in`, `out`, `hash_ids`
  and optionally `think_time` and `api_time`; a `subagent` entry has `agent_id`, `duration_ms` and its own
  `requests`.
- tracelab: JSON lines, one per round: `session_id`, `round_index`, `input_tokens_total`, `prefix_tokens`,
  `output_tokens`, `reasoning_output_tokens`, `tools` (each with `tool_wall_latency_ms`). A round's first
  `prefix_tokens` are the previous round's context; the rest is new. The wait before a round is the sum of
  the previous round's tool latencies.
- otel: OTLP JSON (`resourceSpans` / `scopeSpans` / `spans`, or a list of spans), one session per trace. A
  span with `gen_ai.usage.input_tokens` is a call. It follows the earlier call whose output message appears
  in its input, else the nearest earlier call of its trace that ended before it started; a call followed
  by several starts a subagent for each one after the first. The wait is the recorded gap. Blocks are named
  by the messages they hold, so calls that repeat leading messages share leading blocks.

Every error names the file, the line or session, and the field; no error repeats the file's text.
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from typing import Any

import orjson

from loadgen.replay.formats import MAX_COUNT, DatasetError
from loadgen.sessions.detect import SESSION_FORMATS, detect_session_format
from loadgen.sessions.model import Agent, Call, SessionSet, SessionTrace

DEFAULT_BLOCK_TOKENS = 64
CHARS_PER_TOKEN = 4


def read_sessions(path: str | Path, format: str | None = None, block_tokens: int | None = None) -> SessionSet:
    """`block_tokens`: the block size of hash ids where the file does not say (Weka's `block_size` wins)."""
    path = Path(path)
    if not path.exists():
        raise DatasetError(f"--dataset {path}: no such file or directory")
    files = sorted(p for p in path.iterdir() if p.suffix == ".json") if path.is_dir() else [path]
    if not files:
        raise DatasetError(f"--dataset {path}: the directory holds no .json file (one Weka session each)")
    texts = [(f, f.read_bytes()) for f in files]
    digest = hashlib.sha256(b"".join(raw for _, raw in texts)).hexdigest()
    told = format or detect_session_format(path, texts[0][1].decode("utf-8-sig", errors="replace"))
    if told is None or told not in SESSION_FORMATS:
        raise DatasetError(f"{path}: can't tell its session format from its first object; name it with "
                           "--dataset-format weka|tracelab|otel (weka: {\"id\", \"block_size\", \"requests\"} a "
                           "session; tracelab: {\"session_id\", \"round_index\", ...} a line; otel: an OTLP export, "
                           "{\"resourceSpans\": [...]})")
    block = block_tokens or DEFAULT_BLOCK_TOKENS
    sessions: list[SessionTrace] = []
    for file, raw in texts:
        text = raw.decode("utf-8-sig", errors="replace")
        if not text.strip():
            raise DatasetError(f"{file}: the file is empty (expected {told} sessions)")
        if told == "weka":
            sessions += [_weka_session(obj, where, block_tokens) for where, obj in _json_objects(file, text)]
        elif told == "tracelab":
            sessions += _tracelab(file, text, block)
        else:
            sessions += _otel(file, text, block)
    if not sessions:
        raise DatasetError(f"{path}: no session in it ({told} format)")
    return SessionSet(path, told, digest, tuple(sessions))


def _json_objects(file: Path, text: str) -> list[tuple[str, Any]]:
    """(where, object) of a file holding one JSON value (an object or a list of them) or JSON lines."""
    try:
        whole = orjson.loads(text)
    except orjson.JSONDecodeError:
        whole = None
    if isinstance(whole, dict):  # one session: a file of one line is line 1 of JSON lines
        return [(f"{file}:1" if "\n" not in text.strip() else str(file), whole)]
    if isinstance(whole, list):
        return [(f"{file}: entry {i}", obj) for i, obj in enumerate(whole, start=1)]
    objects = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                objects.append((f"{file}:{number}", orjson.loads(line)))
            except orjson.JSONDecodeError as exc:
                raise DatasetError(f"{file}:{number}: not valid JSON ({exc.msg}, column {exc.colno})") from None
    return objects


def _weka_session(obj: Any, where: str, block_tokens: int | None) -> SessionTrace:
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected a session object with 'id' and 'requests'")
    session_id = obj.get("id")
    if not isinstance(session_id, (str, int)) or isinstance(session_id, bool):
        raise DatasetError(f"{where}: field 'id' must be a string or a whole number")
    where = f"{where} (session {session_id})"
    block = obj.get("block_size", block_tokens or DEFAULT_BLOCK_TOKENS)
    if not isinstance(block, int) or isinstance(block, bool) or not 1 <= block <= MAX_COUNT:
        raise DatasetError(f"{where}: field 'block_size' must be a whole number from 1 to {MAX_COUNT:,}")
    main = Agent("main", _weka_items(obj.get("requests"), f"{where}: requests"))
    if not main.calls:
        raise DatasetError(f"{where}: field 'requests' holds no request of the main agent")
    return SessionTrace(str(session_id), where, main, block)


def _weka_items(requests: Any, where: str) -> tuple[Call | Agent, ...]:
    if not isinstance(requests, list):
        raise DatasetError(f"{where}: must be a list of requests")
    items: list[Call | Agent] = []
    for i, request in enumerate(requests):
        at = f"{where}[{i}]"
        if not isinstance(request, dict):
            raise DatasetError(f"{at}: expected a request object")
        t_s = _number(request, "t", at, required=True)
        if request.get("type") == "subagent":
            agent_id = request.get("agent_id")
            if not isinstance(agent_id, str) or not agent_id:
                raise DatasetError(f"{at}: a subagent needs a non-empty string 'agent_id'")
            duration_ms = _number(request, "duration_ms", at, required=True)
            sub = Agent(agent_id, _weka_items(request.get("requests"), f"{at}.requests"), t_s,
                        None if duration_ms is None else duration_ms / 1000)
            if not sub.calls:
                raise DatasetError(f"{at}: subagent {agent_id!r} has no request")
            items.append(sub)
            continue
        hash_ids = request.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
            raise DatasetError(f"{at}: field 'hash_ids' must be a list of whole numbers")
        items.append(Call(_count(request, "in", at), _count(request, "out", at), tuple(hash_ids), t_s,
                          _number(request, "think_time", at), _number(request, "api_time", at)))
    return tuple(items)


def _tracelab(file: Path, text: str, block: int) -> list[SessionTrace]:
    rounds: dict[str, list[tuple[int, str, dict[str, Any]]]] = defaultdict(list)
    for where, row in _json_objects(file, text):
        if not isinstance(row, dict):
            raise DatasetError(f"{where}: expected a round object with 'session_id' and 'round_index'")
        session_id = row.get("session_id")
        if not isinstance(session_id, (str, int)) or isinstance(session_id, bool):
            raise DatasetError(f"{where}: field 'session_id' must be a string or a whole number")
        index = _count(row, "round_index", where, minimum=0)
        rounds[str(session_id)].append((index, where, row))
    return [_tracelab_session(session_id, sorted(rows, key=lambda r: r[0]), file, block)
            for session_id, rows in rounds.items()]


def _tracelab_session(session_id: str, rows: list[tuple[int, str, dict[str, Any]]], file: Path,
                      block: int) -> SessionTrace:
    """Blocks: a round's leading `prefix_tokens` take the previous context's blocks, the rest are new; its
    context is then its prompt's blocks and its answer's."""
    context: list[int] = []
    next_id = 0
    calls: list[Call] = []
    think_s = 0.0
    for _, at, row in rows:
        where = f"{at} (session {session_id})"
        num_in = _count(row, "input_tokens_total", where)
        prefix = _count(row, "prefix_tokens", where, minimum=0)
        if prefix > num_in:
            raise DatasetError(f"{where}: field 'prefix_tokens' ({prefix}) is more than 'input_tokens_total' "
                               f"({num_in})")
        num_out = _count(row, "output_tokens", where)
        reasoning = _count(row, "reasoning_output_tokens", where, minimum=0, default=0)
        kept = context[: prefix // block]
        fresh = range(next_id, next_id + math.ceil(num_in / block) - len(kept))
        answer = range(fresh.stop, fresh.stop + math.ceil((num_out + reasoning) / block))
        next_id = answer.stop
        hash_ids = (*kept, *fresh)
        calls.append(Call(num_in, num_out + reasoning, hash_ids, think_s=think_s, reasoning_tokens=reasoning))
        context = [*hash_ids, *answer]
        think_s = _tool_wait_s(row.get("tools", []), where)
    return SessionTrace(session_id, f"{file} (session {session_id})", Agent("main", tuple(calls)), block)


def _tool_wait_s(tools: Any, where: str) -> float:
    if not isinstance(tools, list):
        raise DatasetError(f"{where}: field 'tools' must be a list of {{\"tool_name\", \"tool_wall_latency_ms\"}}")
    total = 0.0
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise DatasetError(f"{where}: tools[{i}] must be an object with 'tool_wall_latency_ms'")
        total += _number(tool, "tool_wall_latency_ms", f"{where}: tools[{i}]", required=True) or 0.0
    return total / 1000


def _number(row: dict[str, Any], name: str, where: str, required: bool = False) -> float | None:
    value = row.get(name)
    if value is None and not required:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
        state = "missing" if value is None else repr(value)
        raise DatasetError(f"{where}: field '{name}' must be a number >= 0 (got {state})")
    return float(value)


def _count(row: dict[str, Any], name: str, where: str, minimum: int = 1, default: int | None = None) -> int:
    value = row.get(name, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        state = "missing" if value is None else repr(value)
        raise DatasetError(f"{where}: field '{name}' must be a whole number >= {minimum} (got {state})")
    if value > MAX_COUNT:  # a count of tokens becomes that many blocks: bounded before anything is built
        raise DatasetError(f"{where}: field '{name}' must be at most {MAX_COUNT:,} (got {value})")
    return value


# OpenTelemetry


def _otel(file: Path, text: str, block: int) -> list[SessionTrace]:
    calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for where, obj in _json_objects(file, text):
        for number, (place, span) in enumerate(_spans_in(obj, where), start=1):
            call = _otel_span(span, f"{where}: span {number}{place}")
            if call is not None:
                calls[call["trace_id"]].append(call)
    return [_otel_session(trace_id, sorted(of_trace, key=lambda c: c["start"]), file, block)
            for trace_id, of_trace in calls.items()]


def _spans_in(obj: Any, where: str) -> list[tuple[str, Any]]:
    """(where in the export, span) for each span: ' (resourceSpans[0].scopeSpans[0].spans[2])', or '' for a span
    given alone."""
    if isinstance(obj, dict) and ("traceId" in obj or "trace_id" in obj):
        return [("", obj)]
    if not isinstance(obj, dict):
        raise DatasetError(f"{where}: expected an OTLP export ({{\"resourceSpans\": [...]}}) or a span")
    spans: list[tuple[str, Any]] = []
    for i, resource in enumerate(_listed(obj, ("resourceSpans", "resource_spans"), where)):
        at = f"resourceSpans[{i}]"
        if not isinstance(resource, dict):
            raise DatasetError(f"{where}: {at}: expected an object with 'scopeSpans'")
        for j, scope in enumerate(_listed(resource, ("scopeSpans", "scope_spans"), f"{where}: {at}")):
            if not isinstance(scope, dict):
                raise DatasetError(f"{where}: {at}.scopeSpans[{j}]: expected an object with 'spans'")
            listed = _listed(scope, ("spans",), f"{where}: {at}.scopeSpans[{j}]")
            spans += [(f" ({at}.scopeSpans[{j}].spans[{k}])", span) for k, span in enumerate(listed)]
    return spans


def _listed(obj: dict[str, Any], names: tuple[str, ...], where: str) -> list[Any]:
    """The list under the first of `names` the object has (OTLP JSON's camelCase, or the proto's snake_case)."""
    name = next((n for n in names if n in obj), names[0])
    value = obj.get(name) or []
    if not isinstance(value, list):
        raise DatasetError(f"{where}: field '{name}' must be a list")
    return value


def _otel_span(span: Any, where: str) -> dict[str, Any] | None:
    """A GenAI call's fields; None for a span that is not one (a tool's, an agent's)."""
    if not isinstance(span, dict):
        raise DatasetError(f"{where}: expected a span object")
    attributes = _attributes(span.get("attributes", []), where)
    if "gen_ai.usage.input_tokens" not in attributes:
        return None
    id_key, start_key, end_key = (_spelled(span, names) for names in (("traceId", "trace_id"),
                                                                         ("startTimeUnixNano", "start_time"),
                                                                         ("endTimeUnixNano", "end_time")))
    trace_id = span.get(id_key)
    if not isinstance(trace_id, str) or not trace_id:
        raise DatasetError(f"{where}: field '{id_key}' must be a non-empty string")
    start = _time_s(span.get(start_key), f"{where}: field '{start_key}'")
    end = _time_s(span.get(end_key), f"{where}: field '{end_key}'")
    if end < start:
        raise DatasetError(f"{where}: field '{end_key}' is before '{start_key}'")
    counts = {name: _count({name: _int_value(attributes.get(name))}, name, where)
              for name in ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens")}
    return {"trace_id": trace_id, "start": start, "end": end, "where": where,
            "input_tokens": counts["gen_ai.usage.input_tokens"], "output_tokens": counts["gen_ai.usage.output_tokens"],
            "inputs": [*_messages(attributes, "gen_ai.tool.definitions", where),
                       *_messages(attributes, "gen_ai.input.messages", where)],
            "outputs": _messages(attributes, "gen_ai.output.messages", where)}


def _spelled(span: dict[str, Any], names: tuple[str, str]) -> str:
    """The field's name as the file spells it (OTLP JSON's camelCase first)."""
    return names[1] if names[0] not in span and names[1] in span else names[0]


def _attributes(raw: Any, where: str) -> dict[str, Any]:
    """OTLP's [{"key", "value": {"stringValue": ...}}] or a plain mapping."""
    if isinstance(raw, dict):
        return raw
    if not isinstance(raw, list):
        raise DatasetError(f"{where}: field 'attributes' must be a list of {{\"key\", \"value\"}} or an object")
    values = {}
    for item in raw:
        if isinstance(item, dict) and isinstance(item.get("key"), str):
            value = item.get("value")
            values[item["key"]] = next(iter(value.values()), None) if isinstance(value, dict) else value
    return values


def _int_value(value: Any) -> Any:
    return int(value) if _is_digits(value) else value


def _is_digits(value: Any) -> bool:
    """A string of ASCII digits, short enough for int() (str.isdigit alone takes '²' and '٣')."""
    return isinstance(value, str) and value.isascii() and value.isdigit() and len(value) < 300


def _messages(attributes: dict[str, Any], name: str, where: str) -> list[bytes]:
    """Each message (or tool definition) as canonical JSON, so equal messages compare equal."""
    value = attributes.get(name)
    if value is None:
        return []
    if isinstance(value, str):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            raise DatasetError(f"{where}: attribute '{name}' is not valid JSON") from None
    if not isinstance(value, list):
        raise DatasetError(f"{where}: attribute '{name}' must be a JSON list")
    return [orjson.dumps(m, option=orjson.OPT_SORT_KEYS) for m in value]


def _time_s(value: Any, where: str) -> float:
    """Nanoseconds since the epoch (a number or a string of digits), or an ISO 8601 date and time."""
    if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
        return value / 1e9
    if _is_digits(value):
        return int(value) / 1e9
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
        except (ValueError, OverflowError):  # not a time, or one the platform can't place (year 1)
            pass
    raise DatasetError(f"{where}: expected nanoseconds since the epoch or an ISO 8601 time (got "
                       f"{'nothing' if value is None else type(value).__name__})")


def _otel_session(trace_id: str, spans: list[dict[str, Any]], file: Path, block: int) -> SessionTrace:
    t0 = spans[0]["start"]
    follows = [_followed(spans, j) for j in range(len(spans))]
    children: dict[int, list[int]] = defaultdict(list)
    roots: list[int] = []
    for j, parent in enumerate(follows):
        (roots if parent is None else children[parent]).append(j)

    def agent(first: int, agent_id: str, delay_s: float) -> Agent:
        items: list[Call | Agent] = []
        j: int | None = first
        while j is not None:
            span = spans[j]
            parent = follows[j]
            think = 0.0 if parent is None or j == first else span["start"] - spans[parent]["end"]
            items.append(Call(span["input_tokens"], span["output_tokens"], _message_blocks(span, block),
                              t_s=span["start"] - t0, think_s=max(think, 0.0)))
            after = children.get(j, [])
            for k in after[1:]:
                items.append(agent(k, f"span-{k + 1}", max(spans[k]["start"] - span["end"], 0.0)))
            j = after[0] if after else None
        return Agent(agent_id, tuple(items), delay_s=delay_s)

    main = agent(roots[0], "main", 0.0)
    others = tuple(agent(k, f"span-{k + 1}", spans[k]["start"] - t0) for k in roots[1:])
    main = Agent("main", (*others, *main.items)) if others else main
    return SessionTrace(trace_id, f"{file} (trace {trace_id})", main, block)


def _followed(spans: list[dict[str, Any]], j: int) -> int | None:
    """The call span j follows: the latest earlier one whose output it was given, else the one that ended
    last before it started."""
    inputs = set(spans[j]["inputs"])
    earlier = range(j - 1, -1, -1)
    by_output = next((i for i in earlier if inputs & set(spans[i]["outputs"])), None)
    if by_output is not None:
        return by_output
    ended = [i for i in earlier if spans[i]["end"] <= spans[j]["start"]]
    return max(ended, key=lambda i: spans[i]["end"]) if ended else None


def _message_blocks(span: dict[str, Any], block: int) -> tuple[int, ...]:
    """Block ids from the messages: block i is named by the messages up to the one it ends in (tokens
    estimated at 4 characters each), so two calls that share leading messages share those blocks."""
    ids: list[int] = []
    chain = hashlib.sha256()
    covered = 0
    for message in span["inputs"]:
        chain.update(message)
        covered += max(1, math.ceil(len(message) / CHARS_PER_TOKEN))
        name = int.from_bytes(chain.digest()[:6], "big")
        while (len(ids) + 1) * block <= covered and len(ids) * block < span["input_tokens"]:
            ids.append(name * 4096 + len(ids) % 4096)
    return tuple(ids)

