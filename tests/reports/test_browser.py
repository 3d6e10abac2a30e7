"""The HTML report in a real headless browser (Chromium from the distribution's packages): it loads from
disk with no console errors and no request leaving the file, and every plot is a decoded, non-blank image."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import matplotlib.image
import pytest

from bench.flows.report import render_report
from tests.reports.browser import check_page, find_chromium

pytestmark = pytest.mark.skipif(find_chromium() is None, reason="needs chromium (apt-get install chromium)")


def test_report_opens_from_disk_without_errors_and_every_plot_is_a_real_image(complete_run: Path,
                                                                              tmp_path: Path) -> None:
    files = render_report([complete_run], tmp_path / "report.html", today=date(2025, 6, 1)).files
    page = check_page(files.html, tmp_path / "screenshot.png")
    assert page.errors == []
    assert page.outside_requests == []
    assert page.title.startswith("Self-host or pay per token")
    assert files.data["verdict"]["headline"] in page.text
    assert len(page.images) == len(files.data["plots"]) == 6  # every plot but the GPU power one (no GPU read)
    for image in page.images:
        assert image["complete"] and image["width"] > 400 and image["height"] > 200, image
        assert image["std"] > 10, f"{image['alt']} is blank"  # grey levels 0-255
    shot = matplotlib.image.imread(tmp_path / "screenshot.png")
    assert shot.shape[0] > 2000 and shot[..., :3].std() > 0.05  # the whole page, not an empty one
