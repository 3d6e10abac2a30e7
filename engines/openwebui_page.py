"""Open WebUI's real page, driven as a user drives it: sign in, the engine's model selected, a question
sent, the streamed answer seen; a screenshot of it for the run directory and the report.

Playwright (the `ui` extra) drives the system's Chromium (no browser download); where either is missing,
`check_page` says so instead of failing the run: the measurement does not depend on the picture.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

if TYPE_CHECKING:  # playwright is the optional `ui` extra, imported where the page is driven
    from playwright.sync_api import Page

SCREENSHOT = "openwebui.png"  # in the run directory
FAILED_SCREENSHOT = "openwebui-failed.png"  # what the page showed when it did not answer
QUESTION = "In one sentence: what does a KV cache save an LLM server?"
# Chromium as this machine allows it: no sandbox as root, no GPU, and no background connections.
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


@dataclass(frozen=True)
class PageCheck:
    """What the page showed, or why it was not looked at."""

    screenshot: str | None  # file name in the run directory
    answer: str | None
    seconds: float | None
    why_not: str | None = None


def find_chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


def check_page(root: str, email: str, password: str, model: str, out_dir: Path, timeout_s: float = 60.0
               ) -> PageCheck:
    """Sign in as `email`, ask one question through the page; the answer's text and a screenshot, or why not."""
    chromium = find_chromium()
    if chromium is None:
        return PageCheck(None, None, None, "no Chromium here (apt-get install chromium)")
    if not _serves_a_page(root + "/auth"):
        return PageCheck(None, None, None, f"{root}/auth serves no page")
    try:
        from playwright.sync_api import Error as PlaywrightError
        from playwright.sync_api import sync_playwright
    except ImportError:
        return PageCheck(None, None, None, "Playwright is not installed: pip install -e '.[ui]'")
    started = time.monotonic()
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=CHROMIUM_ARGS)
            try:
                page = browser.new_page(viewport={"width": 1280, "height": 800})
                try:
                    answer = _ask(page, root, email, password, model, timeout_s * 1000)
                except PlaywrightError as exc:
                    why = f"the page did not answer: {str(exc).splitlines()[0]}"
                    return PageCheck(_screenshot(page, out_dir / FAILED_SCREENSHOT), None, None, why)
                return PageCheck(_screenshot(page, out_dir / SCREENSHOT), answer, round(time.monotonic() - started, 1))
            finally:
                browser.close()
    except PlaywrightError as exc:  # Chromium did not start
        return PageCheck(None, None, None, f"Chromium did not start: {str(exc).splitlines()[0]}")


def _serves_a_page(url: str) -> bool:
    try:
        response = httpx.get(url, timeout=10)
    except httpx.HTTPError:
        return False
    return response.status_code == 200 and response.headers.get("content-type", "").startswith("text/html")


def _screenshot(page: Page, path: Path) -> str | None:
    try:
        page.screenshot(path=str(path))
    except Exception:  # the page is gone: no picture, and the reason is said already
        return None
    return path.name


def _ask(page: Page, root: str, email: str, password: str, model: str, timeout_ms: float) -> str:
    page.set_default_timeout(timeout_ms)
    page.goto(root + "/auth", wait_until="networkidle")
    page.fill("input[type=email]", email)
    page.fill("input[type=password]", password)
    page.click("button[type=submit]")
    page.locator("#chat-input").wait_for()
    page.wait_for_timeout(1000)  # the release notes open once per account, a moment after the page
    notes = page.get_by_text("Okay, Let's Go!")
    if notes.count() and notes.first.is_visible():
        notes.first.click()
    if not page.locator(f'[aria-label="Selected model: {model}"]').count():
        page.click("#model-selector-model-button")
        page.get_by_text(model, exact=True).first.click()
    page.locator("#chat-input").click()
    page.keyboard.type(QUESTION)
    page.keyboard.press("Enter")
    # Streamed: wait for text, then for the message's action buttons, shown once the answer is complete.
    page.wait_for_function("() => { const m = document.querySelectorAll('#response-content-container');"
                           " return m.length && m[m.length - 1].innerText.trim().length > 0 }")
    page.locator("#continue-response-button").first.wait_for()
    page.wait_for_timeout(500)
    return str(page.locator("#response-content-container").last.inner_text()).strip()
