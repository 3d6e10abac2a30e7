#!/usr/bin/env bash
# Remakes the images in docs/images/ with the toolkit's own commands: small runs of the default model
# (SmolLM2-135M on the reference engine), a few seconds a level, so it takes a few minutes on 2 CPU cores.
# Each page shows, under its image, the command that made it here.
#
#   docs/make_images.sh            (from the repository root, in the project's .venv)
#
# The report's first screen is a screenshot of report.html in the system Chromium, through Playwright
# (pip install -e '.[ui]'; no browser download).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/.venv/bin:$PATH"
images=docs/images
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
mkdir -p "$images"

newest() { ls -d "$1"/*/ | sort | tail -n 1; }

# A report: a sweep of the reference engine writes report.html at its end.
bench sweep --model default --concurrency 1,4 --duration 4 --input-tokens 128 --output-tokens 32 \
    --out "$work/sweep"
report=$(newest "$work/sweep")report.html

# A tune: the default configuration against max-num-seqs 1 and 8, and the Pareto chart across them.
bench tune --model default --grid max-num-seqs=1,8 --concurrency 1,4 --duration 4 --input-tokens 128 \
    --output-tokens 32 --out "$work/tune"
cp "$(newest "$work/tune")pareto.png" "$images/tune-pareto.png"

# Agent sessions: the shipped sample trace, two sessions alive; the report draws one as a swim lane.
bench sweep --scenario agent --model default --concurrency 2 --sessions 2 --duration 60 --out "$work/agent"
cp "$(newest "$work/agent")plots/session_lane.png" "$images/session-lane.png"

# The report's first screen, as a reader opening report.html sees it.
python - "$report" "$images/report-first-screen.png" <<'EOF'
import sys
from pathlib import Path

from playwright.sync_api import sync_playwright

from engines.openwebui_page import find_chromium

report, png = Path(sys.argv[1]), Path(sys.argv[2])
with sync_playwright() as playwright:
    browser = playwright.chromium.launch(executable_path=find_chromium(), args=["--no-sandbox"])
    page = browser.new_page(viewport={"width": 1100, "height": 800})
    page.goto(report.resolve().as_uri())
    page.screenshot(path=str(png))
    browser.close()
EOF
ls -l "$images"
