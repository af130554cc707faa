"""A worker of a clustersync job in a few dozen lines, through `clustersync serve` (no Redis):
it leases URLs, fetches them with httpx, pushes the links it finds and acks each page
(docs/http-workers.md). Usage: python http_worker.py SERVE_URL JOB TOKEN [MAX_PAGES]"""

from __future__ import annotations

import re
import sys
import time
import uuid
from typing import Any
from urllib.parse import urljoin

import httpx

HREF = re.compile(r"""href=["']([^"'#]+)""")


def call(api: httpx.Client, path: str, body: dict[str, Any]) -> Any:
    """POST ``body``; a lost reply or a 5xx is sent again as it is: its call id makes the
    retry change nothing more than the first try did."""
    for attempt in range(8):
        try:
            reply = api.post(path, json=body)
            if reply.status_code < 500:
                return reply.raise_for_status().json()
        except httpx.TransportError:
            pass
        time.sleep(min(2**attempt * 0.1, 5))
    raise SystemExit(f"serve did not answer {path}")


def crawl(serve: str, job: str, token: str, max_pages: int) -> int:
    node = f"httpx-{uuid.uuid4().hex[:8]}"
    api = httpx.Client(base_url=f"{serve}/api/v1/jobs/{job}/nodes/{node}", timeout=30,
                       headers={"Authorization": f"Bearer {token}"} if token else {})
    web = httpx.Client(timeout=30, follow_redirects=True)
    epoch = call(api, "/join", {"ttl_ms": 30_000})["epoch"]
    done = 0
    while done < max_pages:
        ask = {"epoch": epoch, "call_id": uuid.uuid4().hex, "lease_ms": 60_000,
               "count": min(4, max_pages - done)}
        entries = call(api, "/lease", ask)["entries"]
        beat = call(api, "/heartbeat", {"epoch": epoch, "idle": not entries,
                                        "lease_ids": [e["id"] for e in entries]})
        if not entries:
            if beat["finished"] or beat["control"] == "stopped":
                break
            time.sleep(0.5)
            continue
        for entry in entries:
            try:
                page = web.get(entry["url"])
            except httpx.HTTPError as exc:
                call(api, "/flush", {"epoch": epoch, "call_id": uuid.uuid4().hex, "failed": [
                    {"id": entry["id"], "url": entry["url"], "error": repr(exc)}]})
                continue
            links = [urljoin(entry["url"], href) for href in HREF.findall(page.text)]
            # the page's links and its ack in one step: the ack is never ahead of its links
            call(api, "/flush", {"epoch": epoch, "call_id": uuid.uuid4().hex,
                                 "push": [{"url": link} for link in links if
                                          link.startswith(("http://", "https://"))],
                                 "ack": [entry["id"]]})
            done += 1
    call(api, "/leave", {"epoch": epoch})
    return done


if __name__ == "__main__":
    pages = crawl(sys.argv[1], sys.argv[2], sys.argv[3],
                  int(sys.argv[4]) if len(sys.argv) > 4 else 10**9)
    print(f"{pages} pages crawled")
