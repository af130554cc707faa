"""How ``clustersync export`` and ``consume`` write results: JSON lines or CSV.

A JSON line is one object: ``stream_id`` (the stream entry's id: ``export --since`` takes it),
``id`` (the result id), ``kind``, ``url``, ``spider``, ``node``, ``crawled_at`` (ISO 8601 UTC)
and the result's map under its kind's name (``item``, ``error`` or ``page``), every value in
its JSON form (record_format.to_json_value: datetimes ISO 8601, Decimals as strings, bytes
base64, sets as sorted lists). CSV has the same columns, the map as one JSON text in ``data``.
"""

from __future__ import annotations

import csv
import json
from typing import IO, Any

from .record_format import Result, to_json_value

FORMATS = ("jsonl", "csv")
CSV_COLUMNS = ("stream_id", "id", "kind", "url", "spider", "node", "crawled_at", "data")


def result_dict(result: Result) -> dict[str, Any]:
    """``result`` as the JSON object a line holds."""
    return {"stream_id": result.stream_id, "id": result.id, "kind": result.kind,
            "url": result.url, "spider": result.spider, "node": result.node,
            "crawled_at": result.crawled_at.isoformat(timespec="milliseconds"),
            result.kind: to_json_value(result.data)}


def json_line(result: Result) -> str:
    """One JSON line (no newline), keys in a fixed order, non-ASCII text as it is."""
    return json.dumps(result_dict(result), ensure_ascii=False)


class ResultWriter:
    """Writes results to ``out`` in ``fmt`` (one of FORMATS); CSV starts with its header."""

    def __init__(self, out: IO[str], fmt: str) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"unknown format {fmt!r}: {', '.join(FORMATS)}")
        self.out = out
        self._csv = csv.writer(out) if fmt == "csv" else None
        if self._csv is not None:
            self._csv.writerow(CSV_COLUMNS)

    def write(self, results: list[Result]) -> None:
        """Write ``results`` and flush: once this returns, they reached the file or pipe."""
        if self._csv is not None:
            for result in results:
                row = result_dict(result)
                row["data"] = json.dumps(row.pop(result.kind), ensure_ascii=False)
                self._csv.writerow([row[name] for name in CSV_COLUMNS])
        else:
            self.out.write("".join(json_line(result) + "\n" for result in results))
        self.out.flush()
