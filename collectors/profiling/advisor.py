"""msprof-analyze's advisor, where it is installed: run it, quote its high-priority findings.

``msprof-analyze advisor all -d DIR -o OUT -l en`` (PyPI ``msprof-analyze``, the optional
``profile`` extra) writes ``OUT/mstt_advisor_<ts>.html``. Each finding there is a section
whose header is coloured by priority: ``#B5495B`` high, ``#fcaf17`` medium, ``#65c294`` low
(msprof-analyze ``advisor/display/html/priority_background_color.py``); the same findings
are printed as a table (category, description, suggestion) on stdout, whose layout is the
same for every analyzer while the page's sections differ. ``findings`` joins the two (pure);
``run_advisor`` runs the tool in a scratch directory with a timeout, argv only.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

from ascend_doctor.collectors.profiling.model import AdvisorFinding
from ascend_doctor.core import regex

EXECUTABLE = "msprof-analyze"
PRIORITY_COLOURS = {"#b5495b": "high", "#fcaf17": "medium", "#65c294": "low"}
TIMEOUT_S = 300.0
"""The advisor parses every timeline event in Python: minutes on a large capture."""
_COLOUR = regex.compile(r"background-color:\s*(#[0-9a-fA-F]{6})")


class _Headers(HTMLParser):
    """Collects the title and priority colour of every coloured section header."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.priorities: dict[str, str] = {}
        self._title: list[str] | None = None
        self._colour = ""

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "h2":
            m = _COLOUR.search(dict(attrs).get("style") or "")
            self._colour = m.group(1).lower() if m else ""
            self._title = [] if self._colour in PRIORITY_COLOURS else None

    def handle_data(self, data: str) -> None:
        if self._title is not None:
            self._title.append(data)

    def handle_endtag(self, tag: str) -> None:
        if tag == "h2" and self._title is not None:
            title = " ".join("".join(self._title).split()).lower()
            self.priorities[title] = PRIORITY_COLOURS[self._colour]
            self._title = None


def parse_priorities(html: str) -> dict[str, str]:
    """Section title (lower case) -> ``high``/``medium``/``low`` from the advisor page."""
    page = _Headers()
    page.feed(html)
    page.close()
    return page.priorities


def parse_table(text: str) -> list[tuple[str, str, str]]:
    """(category, description, suggestion) rows of the advisor's terminal table.

    The table is prettytable's: ``+---+`` borders whose ``+`` mark the column edges, and
    cells that wrap onto continuation lines; columns are cut at the border's positions, so
    a ``|`` inside a description does not split it.
    """
    rows: list[tuple[str, str, str]] = []
    edges: list[int] = []
    cells: list[list[str]] | None = None
    header_done = False
    for line in text.splitlines():
        if line.startswith("+") and line.rstrip().endswith("+"):
            edges = [i for i, ch in enumerate(line) if ch == "+"]
            if cells is not None and header_done and len(cells) >= 4:
                joined = [" ".join(" ".join(c).split()) for c in cells]
                rows.append((joined[1], joined[2], joined[3]))
            elif cells is not None:
                header_done = True
            cells = [[] for _ in range(len(edges) - 1)]
            continue
        if cells is None or not line.startswith("|") or len(edges) < 2:
            continue
        for i in range(len(edges) - 1):
            cells[i].append(line[edges[i] + 1 : edges[i + 1]].strip())
    return rows


def findings(table: str, html: str) -> list[AdvisorFinding]:
    """The terminal table's rows, each with its priority from the page (``none`` if not)."""
    prio = parse_priorities(html)
    out = []
    for category, description, suggestion in parse_table(table):
        lower = category.lower()
        level = next((p for title, p in prio.items() if title and title in lower), "none")
        out.append(AdvisorFinding(category, level, description, suggestion))
    return out


SUMMARIES = ("overall summary", "slow rank")
"""Uncoloured sections that are the advisor's verdict on the whole capture, kept as well."""


def high_priority(found: list[AdvisorFinding]) -> tuple[AdvisorFinding, ...]:
    """The findings marked high priority, and the advisor's overall verdicts."""
    return tuple(f for f in found if f.priority == "high" or f.category.lower() in SUMMARIES)


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
        html = pages[-1].read_text(encoding="utf-8", errors="replace")
    found = findings(proc.stdout.decode("utf-8", "replace"), html)
    kept = high_priority(found)
    high = sum(f.priority == "high" for f in kept)
    return kept, f"ran: {len(found)} finding(s), {high} of high priority"
