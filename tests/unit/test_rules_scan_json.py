"""`rules scan --json` writes each row itself (cli/rules.py _json_line): byte for byte what
json.dumps writes of it."""

from __future__ import annotations

import json
from pathlib import Path

from ascend_doctor.cli.rules import _finding_line
from ascend_doctor.core.events import LogChunk
from ascend_doctor.rules import Engine, load_rules

ROOT = Path(__file__).parent.parent


def test_rows_are_what_json_dumps_writes() -> None:
    engine = Engine(load_rules(), clock=lambda: 0.0, context_before=0, context_after=0)
    texts = [
        json.loads(raw)["text"]
        for raw in (ROOT / "corpus" / "dev" / "failures.jsonl").read_text("utf-8").splitlines()
    ]
    data = (
        "\n".join([*texts, 'ERROR 12-01 00:00:00 [x.py:1] \u00e9\u4e2d \\ "q" \x01 zork failed'])
        + "\n"
    )
    found = 0
    for path in ("server.log", 'od"d \u00e9.log', "server.log"):  # a second time: rows cached
        chunk = LogChunk(path, "server", 0, data.encode("utf-8"), first_line=1)
        for f in engine.scan(chunk):
            first = f.evidence[0]
            row = {
                "rule": f.rule,
                "category": f.category.value,
                "severity": f.severity.label,
                "path": f.path,
                "line": first.line,
                "text": first.text,
                "captures": f.captures,
            }
            assert _finding_line(f, True) == json.dumps(row)
            found += 1
    assert found > 3 * 290
