"""A headless Chromium driven over the DevTools protocol: load a page, collect what a person would see go
wrong (console errors, uncaught exceptions, requests leaving the file), measure its images, screenshot it."""

from __future__ import annotations

import asyncio
import base64
import itertools
import json
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from common.processes import terminate
from engines.openwebui_page import find_chromium

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync", "--hide-scrollbars",
         "--remote-debugging-port=0", "--window-size=1200,900"]
# Per image: decoded size, and the spread of its grey levels as the browser drew it on a canvas.
IMAGES_JS = """JSON.stringify(Array.from(document.images).map(img => {
  const c = document.createElement('canvas'); c.width = img.naturalWidth; c.height = img.naturalHeight;
  const g = c.getContext('2d'); g.drawImage(img, 0, 0);
  const d = g.getImageData(0, 0, c.width || 1, c.height || 1).data;
  let s = 0, s2 = 0; const n = d.length / 4;
  for (let i = 0; i < d.length; i += 4) { const v = (d[i] + d[i + 1] + d[i + 2]) / 3; s += v; s2 += v * v; }
  const mean = s / n;
  return {alt: img.alt, width: img.naturalWidth, height: img.naturalHeight, complete: img.complete,
          std: Math.sqrt(Math.max(0, s2 / n - mean * mean))};
}))"""


@dataclass
class PageCheck:
    errors: list[str] = field(default_factory=list)
    outside_requests: list[str] = field(default_factory=list)
    images: list[dict[str, Any]] = field(default_factory=list)
    title: str = ""
    text: str = ""


def check_page(path: Path, screenshot: Path, timeout_s: float = 30) -> PageCheck:
    chromium = find_chromium()
    assert chromium, "chromium is not installed"
    # Chromium's helper processes may still write to the profile for a moment after it is stopped.
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:
        process = subprocess.Popen([chromium, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            port = _devtools_port(Path(profile), process, timeout_s)
            return asyncio.run(asyncio.wait_for(_inspect(port, path.resolve().as_uri(), screenshot), timeout_s))
        finally:
            terminate(process, timeout_s=10)


def _devtools_port(profile: Path, process: subprocess.Popen[bytes], timeout_s: float) -> int:
    deadline = time.monotonic() + timeout_s
    marker = profile / "DevToolsActivePort"
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"chromium exited with {process.returncode}")
        if marker.is_file() and marker.read_text().strip():
            return int(marker.read_text().split()[0])
        time.sleep(0.05)
    raise TimeoutError("chromium did not open its DevTools port")


async def _inspect(port: int, url: str, screenshot: Path) -> PageCheck:
    result = PageCheck()
    async with aiohttp.ClientSession() as http:
        page = None
        while page is None:  # a browser that just opened its port may not list its first page yet
            async with http.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = await response.json(content_type=None)
            page = next((t for t in targets if t.get("type") == "page"), None)
            await asyncio.sleep(0 if page else 0.1)
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            cdp = _Session(ws, result)
            for domain in ("Page", "Runtime", "Log", "Network"):
                await cdp.call(f"{domain}.enable")
            await cdp.call("Page.navigate", url=url)
            await cdp.wait_for("Page.loadEventFired")
            result.images = json.loads(await cdp.evaluate(IMAGES_JS))
            result.title = await cdp.evaluate("document.title")
            result.text = await cdp.evaluate("document.body.innerText")
            shot = await cdp.call("Page.captureScreenshot", format="png", captureBeyondViewport=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
    return result


class _Session:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse, result: PageCheck) -> None:
        self.ws, self.result, self.ids, self.seen = ws, result, itertools.count(1), set()

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        call_id = next(self.ids)
        await self.ws.send_json({"id": call_id, "method": method, "params": params})
        while True:
            message = await self._next()
            if message.get("id") == call_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return message.get("result", {})

    async def evaluate(self, expression: str) -> Any:
        reply = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in reply:
            raise RuntimeError(f"evaluate failed: {reply['exceptionDetails']}")
        return reply["result"]["value"]

    async def wait_for(self, event: str) -> None:
        while event not in self.seen:
            await self._next()

    async def _next(self) -> dict[str, Any]:
        message = json.loads((await self.ws.receive()).data)
        method, params = message.get("method"), message.get("params", {})
        if method:
            self.seen.add(method)
        if method == "Runtime.exceptionThrown":
            self.result.errors.append(f"exception: {params['exceptionDetails'].get('text')}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.result.errors.append(f"console.{params['type']}: {params.get('args')}")
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.result.errors.append(f"log: {params['entry'].get('text')} {params['entry'].get('url', '')}")
        elif method == "Network.requestWillBeSent":
            request_url = params["request"]["url"]
            if not request_url.startswith(("file:", "data:", "about:")):
                self.result.outside_requests.append(request_url)
        return message
