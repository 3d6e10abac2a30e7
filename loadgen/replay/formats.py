"""Files of real traffic -> a `Dataset`: logged prompts (JSONL), conversations (ShareGPT), arrival traces
(Mooncake JSONL, Azure CSV).

The format is named or told from the content. Every error names the file, the line (or entry) and the
field, and says what would be accepted; no error repeats the file's text, which may be private.
"""

from __future__ import annotations

import csv
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from loadgen.quality.graders import GRADERS, check_answer
from loadgen.structured import Structure, StructureError, check_tool_choice, check_tools, response_format_of
from loadgen.types import Grading
from loadgen.workload import TRACE_FORMATS, DatasetFormat

SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "assistant": "assistant",
                  "chatgpt": "assistant", "bing": "assistant", "model": "assistant", "system": "system"}
CHAT_ROLES = ("system", "developer", "user", "assistant")
AZURE_COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")
# No request holds more tokens than this (2^24, past every model's context): a count beyond it is refused, not
# turned into a prompt or a list of blocks that size.
MAX_COUNT = 1 << 24


class DatasetError(ValueError):
    """A dataset that can't be replayed; the message names the file, the line and the field."""


@dataclass(frozen=True)
class Turn:
    user: str
    answer: str | None = None  # the recorded answer: its length is the output length asked for


@dataclass(frozen=True)
class Conversation:
    """A JSONL line or a ShareGPT entry: the user turns to send, with what comes before the first one."""

    index: int  # the line (JSONL) or entry (ShareGPT) it came from, from 1
    turns: tuple[Turn, ...]
    system: str | None = None
    history: tuple[tuple[str, str], ...] = ()  # (role, content) given before the first turn (JSONL messages)
    max_tokens: int | None = None
    grading: Grading | None = None  # a JSONL line with an `answer`: how its first turn's answer is graded
    structure: Structure | None = None  # a JSONL line's own response_format / tools: its answer's shape, judged


@dataclass(frozen=True)
class TraceRequest:
    index: int  # line or row, from 1
    timestamp_s: float
    input_tokens: int
    output_tokens: int
    hash_ids: tuple[int, ...] = ()  # one id per prompt block: equal leading ids, equal leading blocks


@dataclass(frozen=True)
class Dataset:
    path: Path
    format: DatasetFormat
    sha256: str
    conversations: tuple[Conversation, ...] = ()
    trace: tuple[TraceRequest, ...] = ()
    num_skipped: int = 0  # ShareGPT entries without a user turn

    @property
    def is_trace(self) -> bool:
        return self.format in TRACE_FORMATS

    def __len__(self) -> int:
        return len(self.trace) if self.is_trace else len(self.conversations)


def read_dataset(path: str | Path, format: DatasetFormat | None = None) -> Dataset:
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"--dataset {path}: no such file")
    raw = path.read_bytes()
    text = raw.decode("utf-8-sig", errors="replace")
    if not text.strip():
        raise DatasetError(f"{path}: the file is empty (expected requests in one of the formats: jsonl, sharegpt, "
                           "mooncake, azure)")
    format = format or detect_format(path, text)
    sha256 = hashlib.sha256(raw).hexdigest()
    if format == "jsonl":
        dataset = Dataset(path, format, sha256, conversations=tuple(_jsonl_requests(path, text)))
    elif format == "sharegpt":
        conversations, skipped = _sharegpt(path, text)
        dataset = Dataset(path, format, sha256, conversations=tuple(conversations), num_skipped=skipped)
    elif format == "mooncake":
        dataset = Dataset(path, format, sha256, trace=_in_time_order(_mooncake(path, text)))
    else:
        dataset = Dataset(path, format, sha256, trace=_in_time_order(_azure(path, text)))
    if not len(dataset):
        why = f"; {dataset.num_skipped} entries without a user turn" if dataset.num_skipped else ""
        raise DatasetError(f"{path}: no request in it ({format} format{why})")
    return dataset


def is_trace_file(path: Path, format: str | None = None) -> bool:
    """Whether the file (or the format named) is an arrival trace, from its first line only."""
    if format is not None:
        return format in TRACE_FORMATS
    if not path.is_file():
        raise DatasetError(f"--dataset {path}: no such file")
    with path.open("rb") as file:
        head = file.read(1 << 16).decode("utf-8-sig", errors="replace")
    return bool(head.strip()) and detect_format(path, head) in TRACE_FORMATS


def detect_format(path: Path, text: str) -> DatasetFormat:
    """The format from the first line or character; raises DatasetError saying how to name it."""
    head = text.lstrip()
    first_line = head.splitlines()[0] if head else ""
    if path.suffix.lower() == ".csv" or first_line.replace(" ", "").startswith("TIMESTAMP,"):
        return "azure"
    if head.startswith("["):
        return "sharegpt"
    try:
        row = orjson.loads(first_line)
    except orjson.JSONDecodeError:
        row = None
    if isinstance(row, dict):
        if "conversations" in row:
            return "sharegpt"
        if "timestamp" in row and "input_length" in row:
            return "mooncake"
        if "prompt" in row or "messages" in row:
            return "jsonl"
    raise DatasetError(f"{path}: can't tell its format from the first line; name it with --dataset-format "
                       "jsonl|sharegpt|mooncake|azure (jsonl: {\"prompt\": ...} or {\"messages\": [...]} a line; "
                       "sharegpt: a JSON list of {\"conversations\": [...]}; mooncake: {\"timestamp\", "
                       "\"input_length\", \"output_length\", \"hash_ids\"} a line; azure: a CSV with "
                       "TIMESTAMP,ContextTokens,GeneratedTokens)")


def _json_lines(path: Path, text: str) -> list[tuple[int, dict[str, Any]]]:
    rows = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise DatasetError(f"{path}:{number}: not valid JSON ({exc.msg}, column {exc.colno})") from None
        if not isinstance(row, dict):
            raise DatasetError(f"{path}:{number}: expected a JSON object, got {type(row).__name__}")
        rows.append((number, row))
    return rows


def _jsonl_requests(path: Path, text: str) -> list[Conversation]:
    requests = []
    for number, row in _json_lines(path, text):
        where = f"{path}:{number}"
        max_tokens = _optional_count(row, "max_tokens", where) or _optional_count(row, "output_tokens", where)
        grading = _grading(row, where)
        structure = _structure(row, where)
        if "messages" in row:
            system, history, turn = _chat_messages(row["messages"], where)
            requests.append(Conversation(number, (turn,), system, history, max_tokens, grading, structure))
        elif "prompt" in row:
            prompt = row["prompt"]
            if not isinstance(prompt, str) or not prompt:
                raise DatasetError(f"{where}: field 'prompt' must be a non-empty string")
            requests.append(Conversation(number, (Turn(prompt),), max_tokens=max_tokens, grading=grading,
                                         structure=structure))
        else:
            raise DatasetError(f"{where}: expected a field 'prompt' (a string) or 'messages' (OpenAI chat messages)")
    return requests


def _grading(row: dict[str, Any], where: str) -> Grading | None:
    """A line's `answer` (a string or a list of accepted ones), `grader` (default exact) and `category`."""
    if "answer" not in row:
        if "grader" in row:
            raise DatasetError(f"{where}: field 'grader' needs an 'answer' to grade against")
        return None
    answer = row["answer"]
    accepted = answer if isinstance(answer, list) else [answer]
    grader = row.get("grader", "exact")
    why = check_answer(str(grader), accepted) if isinstance(grader, str) else "field 'grader' must be a string"
    if why is not None:
        raise DatasetError(f"{where}: {why} (graders: {', '.join(GRADERS)})")
    category = row.get("category")
    if category is not None and not isinstance(category, str):
        raise DatasetError(f"{where}: field 'category' must be a string")
    return Grading(grader, tuple(accepted), category)


def _structure(row: dict[str, Any], where: str) -> Structure | None:
    """A line's own `response_format` (OpenAI's shape, a schema inline) and `tools` with `tool_choice`."""
    if "response_format" not in row and "tools" not in row:
        if "tool_choice" in row:
            raise DatasetError(f"{where}: field 'tool_choice' needs 'tools'")
        return None
    try:
        response_format = response_format_of(row["response_format"], where) if "response_format" in row else None
        tools = check_tools(row["tools"], f"{where}: field 'tools'") if "tools" in row else ()
        choice = row.get("tool_choice", "auto")
        if isinstance(choice, dict):  # OpenAI's {"type": "function", "function": {"name": ...}}
            choice = (choice.get("function") or {}).get("name")
        if tools:
            choice = check_tool_choice(str(choice), tools, where)
    except StructureError as exc:
        raise DatasetError(str(exc)) from None
    kind = response_format["type"] if response_format else "tools"
    return Structure(f"{kind} (the line's own)", response_format, tools, choice)


def _chat_messages(messages: Any, where: str) -> tuple[str | None, tuple[tuple[str, str], ...], Turn]:
    """OpenAI chat messages -> (system prompt, earlier messages, the user turn to send with its recorded
    answer when the list ends with the assistant's)."""
    if not isinstance(messages, list) or not messages:
        raise DatasetError(f"{where}: field 'messages' must be a non-empty list of {{\"role\", \"content\"}}")
    parsed = []
    for i, message in enumerate(messages):
        field = f"messages[{i}]"
        if not isinstance(message, dict):
            raise DatasetError(f"{where}: {field} must be an object with 'role' and 'content'")
        role = message.get("role")
        if role not in CHAT_ROLES:
            raise DatasetError(f"{where}: {field}.role {role!r} is not one of {', '.join(CHAT_ROLES)}")
        parsed.append(("system" if role == "developer" else role, _content_text(message.get("content"),
                                                                                   f"{where}: {field}.content")))
    answer = parsed.pop()[1] if parsed[-1][0] == "assistant" and len(parsed) > 1 else None
    if parsed[-1][0] != "user":
        raise DatasetError(f"{where}: field 'messages': the last message must be the user's (or the user's, then "
                           f"the recorded assistant answer); got role '{parsed[-1][0]}'")
    system = parsed[0][1] if parsed[0][0] == "system" else None
    earlier = tuple(parsed[1 if system is not None else 0:-1])
    return system, earlier, Turn(parsed[-1][1], answer)


def _content_text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text"
                                         and isinstance(p.get("text"), str) for p in content):
        return "".join(p["text"] for p in content)
    raise DatasetError(f"{where}: expected a string or a list of {{\"type\": \"text\", \"text\": ...}} parts")


def _sharegpt(path: Path, text: str) -> tuple[list[Conversation], int]:
    if text.lstrip().startswith("["):
        try:
            entries = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise DatasetError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno}, column {exc.colno})") from None
        numbered = list(enumerate(entries, start=1))
        label = "entry"
    else:
        numbered, label = _json_lines(path, text), "line"
    conversations, skipped = [], 0
    for number, entry in numbered:
        where = f"{path}: {label} {number}"
        turns = entry.get("conversations") if isinstance(entry, dict) else None
        if not isinstance(turns, list):
            raise DatasetError(f"{where}: expected an object with a list 'conversations' of {{\"from\", \"value\"}}")
        conversation = _sharegpt_conversation(number, turns, where)
        if conversation is None:
            skipped += 1
        else:
            conversations.append(conversation)
    return conversations, skipped


def _sharegpt_conversation(number: int, messages: list[Any], where: str) -> Conversation | None:
    system: str | None = None
    turns: list[Turn] = []
    for i, message in enumerate(messages):
        field = f"conversations[{i}]"
        if not isinstance(message, dict) or not isinstance(message.get("value"), str):
            raise DatasetError(f"{where}: {field} must be an object with 'from' and a string 'value'")
        role = SHAREGPT_ROLES.get(str(message.get("from")).lower())
        if role is None:
            raise DatasetError(f"{where}: {field}.from {message.get('from')!r} is not one of "
                               f"{', '.join(sorted(SHAREGPT_ROLES))}")
        if role == "system":
            system = message["value"] if not turns else system
        elif role == "user":
            turns.append(Turn(message["value"]))
        elif turns and turns[-1].answer is None:  # an answer before any question is a greeting: not sent
            turns[-1] = Turn(turns[-1].user, message["value"])
    return Conversation(number, tuple(turns), system) if turns else None


def _mooncake(path: Path, text: str) -> list[TraceRequest]:
    requests = []
    for number, row in _json_lines(path, text):
        where = f"{path}:{number}"
        timestamp = row.get("timestamp")
        if not isinstance(timestamp, (int, float)) or isinstance(timestamp, bool) or timestamp < 0:
            raise DatasetError(f"{where}: field 'timestamp' must be a number >= 0 (milliseconds)")
        hash_ids = row.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in hash_ids):
            raise DatasetError(f"{where}: field 'hash_ids' must be a list of whole numbers")
        requests.append(TraceRequest(number, timestamp / 1000.0, _count(row, "input_length", where),
                                     _count(row, "output_length", where), tuple(hash_ids)))
    return requests


def _azure(path: Path, text: str) -> list[TraceRequest]:
    reader = csv.DictReader(io.StringIO(text))
    try:
        return _azure_rows(path, reader)
    except csv.Error as exc:  # a cell past the csv module's size limit, a NUL byte
        raise DatasetError(f"{path}:{reader.line_num}: not valid CSV ({exc})") from None


def _azure_rows(path: Path, reader: csv.DictReader[str]) -> list[TraceRequest]:
    columns = [c.strip() for c in reader.fieldnames or []]
    missing = [c for c in AZURE_COLUMNS if c not in columns]
    if missing:
        raise DatasetError(f"{path}: the header lacks column(s) {', '.join(missing)} (expected "
                           f"{','.join(AZURE_COLUMNS)})")
    reader.fieldnames = columns
    requests = []
    first: float | None = None
    for number, row in enumerate(reader, start=2):
        where = f"{path}:{number}"
        seconds = _timestamp_s(row["TIMESTAMP"], where)
        first = seconds if first is None else first
        requests.append(TraceRequest(number, seconds - first, _count(row, "ContextTokens", where),
                                     _count(row, "GeneratedTokens", where)))
    return requests


def _timestamp_s(value: str | None, where: str) -> float:
    """Seconds: a number, or a date and time as Azure's traces write it (2023-11-16 18:15:46.6805900)."""
    text = (value or "").strip()
    try:
        return float(text)
    except ValueError:
        pass
    import pandas as pd  # only for Azure's date-times

    try:
        return pd.Timestamp(text).value / 1e9
    except (ValueError, TypeError, OverflowError):  # not a date, or one outside pandas' years 1677-2262
        raise DatasetError(f"{where}: TIMESTAMP {text!r} is neither seconds nor a date and time "
                           "(e.g. 2023-11-16 18:15:46.680)") from None


def _count(row: dict[str, Any], name: str, where: str) -> int:
    value = row.get(name)
    try:
        count = int(value) if isinstance(value, str) else value
    except ValueError:
        count = None
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        state = "missing" if value is None else f"{value!r}"
        raise DatasetError(f"{where}: field '{name}' must be a whole number >= 1 (got {state})")
    if count > MAX_COUNT:
        raise DatasetError(f"{where}: field '{name}' must be at most {MAX_COUNT:,} (got {count})")
    return count


def _optional_count(row: dict[str, Any], name: str, where: str) -> int | None:
    return None if row.get(name) is None else _count(row, name, where)


def _in_time_order(requests: list[TraceRequest]) -> tuple[TraceRequest, ...]:
    return tuple(sorted(requests, key=lambda r: r.timestamp_s))
