"""msprof-analyze's advisor, where it is installed: run it, quote its high-priority findings.

``msprof-analyze advisor all -d DIR -o OUT -l en`` (PyPI ``msprof-analyze``, the optional
``profile`` extra) writes ``OUT/mstt_advisor_<ts>.html``. Each finding there is a section
whose header is coloured by priority: ``#B5495B`` high, ``#fcaf17`` medium, ``#65c294`` low
(msprof-analyze ``advisor/display/html/priority_background_color.py``), followed by a table
whose first row is its description and suggestion. ``parse_advisor_html`` reads that page
(pure); ``run_advisor`` runs the tool in a scratch directory with a timeout, argv only.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

from ascend_doctor.collectors.profiling.model import AdvisorFinding

EXECUTABLE = "msprof-analyze"
PRIORITY_COLOURS = {"#b5495b": "high", "#fcaf17": "medium", "#65c294": "low"}
TIMEOUT_S = 300.0
"""The advisor parses every timeline event in Python: minutes on a large capture."""
_COLOUR = re.compile(r"background-color:\s*(#[0-9a-fA-F]{6})")


class _Page(HTMLParser):
    """Collects (title, priority, first data row of its first table) per coloured section."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.found: list[AdvisorFinding] = []
        self._title: list[str] | None = None
        self._colour = ""
        self._section: tuple[str, str] | None = None
        self._in_table = False
        self._row: list[str] = []
        self._row_has_td = False
        self._cell: list[str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "h2":
            m = _COLOUR.search(dict(attrs).get("style") or "")
            self._colour = m.group(1).lower() if m else ""
            self._title = [] if self._colour in PRIORITY_COLOURS else None
        elif tag == "table" and self._section is not None:
            self._in_table = True
        elif tag == "tr" and self._in_table:
            self._row, self._row_has_td = [], False
        elif tag in ("td", "th") and self._in_table:
            self._row_has_td |= tag == "td"
            self._cell = []
        elif tag == "br" and self._cell is not None:
            self._cell.append(" ")

    def handle_data(self, data: str) -> None:
        if self._title is not None:
            self._title.append(data)
        elif self._cell is not None:
            self._cell.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "h2" and self._title is not None:
            self._section = (" ".join("".join(self._title).split()), self._colour)
            self._title = None
        elif tag in ("td", "th") and self._cell is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._in_table and self._row_has_td and self._section:
            title, colour = self._section
            desc, sugg = (self._row + ["", ""])[:2]
            self.found.append(AdvisorFinding(title, PRIORITY_COLOURS[colour], desc, sugg))
            self._section, self._in_table = None, False  # the first row is its summary
        elif tag == "table":
            self._in_table = False


def parse_advisor_html(text: str) -> list[AdvisorFinding]:
    """Every prioritised finding of an advisor page, in page order."""
    page = _Page()
    page.feed(text)
    page.close()
    return page.found


def high_priority(findings: list[AdvisorFinding]) -> tuple[AdvisorFinding, ...]:
    """The findings the advisor marked high priority."""
    return tuple(f for f in findings if f.priority == "high")


def advisor_command(exe: str, profile_dir: Path, out_dir: Path) -> list[str]:
    """The argv of one advisor run (English output, to a scratch output directory)."""
    return [exe, "advisor", "all", "-d", str(profile_dir), "-o", str(out_dir), "-l", "en"]


def run_advisor(
    profile_dir: Path, exe: str | None = None, timeout: float = TIMEOUT_S
) -> tuple[tuple[AdvisorFinding, ...], str]:
    """Run the advisor on ``profile_dir``: (high-priority findings, status)."""
    path = exe or shutil.which(EXECUTABLE)
    if path is None:
        return (), "not installed (pip install 'ascend-doctor[profile]')"
    with tempfile.TemporaryDirectory(prefix="ascend-doctor-advisor-") as tmp:
        out = Path(tmp)
        try:
            proc = subprocess.run(
                advisor_command(path, profile_dir, out),
                cwd=tmp,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return (), f"timed out after {timeout:.0f} s"
        except OSError as exc:
            return (), f"could not run {path}: {exc}"
        pages = sorted(out.glob("mstt_advisor_*.html"))
        if proc.returncode != 0 or not pages:
            tail = proc.stderr.decode("utf-8", "replace").strip().splitlines()[-1:] or ["-"]
            return (), f"failed (exit {proc.returncode}): {tail[0][:200]}"
        text = pages[-1].read_text(encoding="utf-8", errors="replace")
    return high_priority(parse_advisor_html(text)), "ran"
