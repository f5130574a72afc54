"""Import hygiene: the daemon and the CLI never load Textual; the TUI imports only core/."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

TUI = Path(__file__).resolve().parents[2] / "tui"


def test_importing_the_daemon_and_cli_does_not_import_textual() -> None:
    code = (
        "import sys\n"
        "import ascend_doctor.agent.daemon, ascend_doctor.cli.main, ascend_doctor.agent.requests\n"
        "loaded = sorted(m for m in sys.modules if m == 'textual' or m.startswith('textual.'))\n"
        "print(','.join(loaded))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.strip() == ""


def test_tui_imports_only_core_of_the_project() -> None:
    bad = []
    for path in sorted(TUI.rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name.startswith("ascend_doctor.") and not name.startswith(
                    ("ascend_doctor.core", "ascend_doctor.tui")
                ):
                    bad.append(f"{path.name}: {name}")
    assert bad == []
