"""`bench engines` and `bench clean`: which engine kinds can run here, and what a bench command that died left
running (`engines.lifeline`), removed; measuring commands warn of the same leftovers before they start."""

from __future__ import annotations

import typer
from rich.markup import escape

from bench.commands.console import console, errors, warn
from bench.commands.helptext import examples

ENGINES_EXAMPLES = examples("bench engines", "bench engines | grep vllm")
CLEAN_EXAMPLES = examples("bench clean --dry-run", "bench clean")


def engines() -> None:
    """Every engine kind, and whether it can run on this machine (and why not)."""
    from bench.commands.tables import engines_table
    from engines.availability import availability

    console.print(engines_table(availability()))


def clean(dry_run: bool = typer.Option(False, help="Only list what would be removed.")) -> None:
    """Stop the engines and remove the containers a bench command that died left behind."""
    from engines import lifeline
    from engines.docker import docker_client
    from engines.launch import EngineStartError

    try:
        client = docker_client()
    except EngineStartError as exc:
        client = None
        errors.print(f"containers not checked: {escape(str(exc))}", highlight=False)
    found = lifeline.leftover_processes() + (lifeline.leftover_containers(client) if client else [])
    elsewhere = lifeline.containers_elsewhere(client) if client else []
    if elsewhere:  # on a daemon other hosts share: whether their commands still run is for their hosts to tell
        names = ", ".join(f"{item.name} (host {item.host or 'not named'})" for item in elsewhere)
        console.print(f"left alone {len(elsewhere)} container(s) that another host started or that name no host "
                      f"(an older bench's), since this host can't tell whether their commands still run: {names}; "
                      "remove one that is yours with `docker rm -f NAME`", highlight=False, markup=False,
                      soft_wrap=True)
    if not found:
        console.print("nothing left behind")
        return
    for item in found:
        console.print(f"{'would remove' if dry_run else 'removing'} {item.describe()}", highlight=False, markup=False)
    if not dry_run:
        lifeline.remove_leftovers(found, client)


def warn_about_leftovers(containers: bool) -> None:
    """Engines an earlier command left running hold ports, memory and GPUs: say so before measuring."""
    from engines import lifeline

    found = lifeline.leftover_processes()
    if containers:
        from engines.docker import docker_client
        from engines.launch import EngineStartError

        try:
            found += lifeline.leftover_containers(docker_client())
        except EngineStartError:
            pass
    if found:
        names = ", ".join(item.describe() for item in found[:5]) + (" ..." if len(found) > 5 else "")
        warn(f"{len(found)} engine(s) left running by a bench command that died: {names}; `bench clean` removes them")

