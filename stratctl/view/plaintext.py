"""Columns as plain text: what a pipe gets from `status` and `plan`, and `-o csv`.

Plain text pads the columns with spaces and never cuts or wraps a cell, so grep, awk and
sort read it; CSV holds the raw values (full precision, RFC 3339 times, JSON for
structures), for spreadsheets and scripts.
"""

from __future__ import annotations

import csv
import io
import json

from stratctl.view.columns import Column


def plain(columns: list[Column]) -> str:
    """Columns padded with spaces: no box, no truncation, no wrapping (for grep, awk, sort).
    Only the last column may hold spaces."""
    if not columns:
        return ""
    widths = [c.width if c is not columns[-1] else 0 for c in columns]
    widths = [max(w, len(c.key)) for w, c in zip(widths, columns)]
    lines = []
    for i in range(-1, len(columns[0].cells)):
        cells = [c.key if i < 0 else c.cells[i] for c in columns]
        parts = [
            cell.rjust(w) if c.numeric and i >= 0 and c is not columns[-1] else cell.ljust(w)
            for cell, w, c in zip(cells, widths, columns)
        ]
        lines.append("   ".join(parts).rstrip())
    return "\n".join(lines) + "\n"


def csv_text(columns: list[Column]) -> str:
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([c.csv_key or c.key for c in columns])
    for i in range(len(columns[0].cells) if columns else 0):
        writer.writerow(
            [
                "" if c.raw[i] is None else (json.dumps(c.raw[i]) if isinstance(c.raw[i], dict | list) else c.raw[i])
                for c in columns
            ]
        )
    return out.getvalue()
