"""What a decision prices, and what was measured instead: a small model on a CPU priced as an 8B model on an H100
illustrates the method, and the verdict's first line says so (as a report's title does).

Pure: from the pricing's names and what the first engine's run recorded it ran on. It never guesses for an
endpoint the user ran (its run does not know the hardware behind it).
"""

from __future__ import annotations

import re
from dataclasses import replace

from costmodel.types import EngineLevels, MeasuredOn, Subject, Verdict


def subject(model: str, gpu: str, gpus_per_replica: int, first: EngineLevels | None) -> Subject:
    """`model` on `gpus_per_replica` x `gpu` as priced, beside what `first` measured where it differs."""
    priced = f"{model} on {f'{gpus_per_replica} x ' if gpus_per_replica > 1 else ''}{gpu}"
    ran = first.measured_on if first is not None else None
    measured = measured_instead(ran, first.engine, model, gpu) if first is not None and ran is not None else None
    return Subject(priced, measured)


def measured_instead(ran: MeasuredOn, engine: str, model: str, gpu: str) -> str | None:
    """`SmolLM2-135M-Instruct.Q4_1 measured on CPU` when the run measured another model or other hardware than
    `model` on `gpu`; None when they agree. `engine` names it where the engine named no model."""
    names = ran.gpu_names
    hardware = "CPU" if names == () else ", ".join(sorted(set(names))) if names else None
    key = next((part for part in gpu.split("-") if any(c.isdigit() for c in part)), None)
    other_hardware = names == () or bool(key and names and not any(
        re.search(rf"\b{re.escape(key)}\b", n, re.IGNORECASE) for n in names))
    squash = lambda text: re.sub(r"[^a-z0-9]", "", text.lower())  # noqa: E731 - one use
    other_model = bool(ran.model) and squash(model) not in squash(ran.model)
    if not (other_hardware or other_model):
        return None
    return f"{ran.model or engine} measured" + (f" on {hardware}" if hardware else "")


def with_subject(said: Verdict, about: Subject) -> Verdict:
    """The verdict, its first line saying what was measured when it is not what is priced."""
    measured = about.measured_instead
    if measured is None:
        return said
    line = (f"{measured[0].upper()}{measured[1:]}, priced as {about.priced}: the figures show the method on this "
            f"machine; measure {about.priced} itself before deciding.")
    return replace(said, lines=(line, *said.lines))
