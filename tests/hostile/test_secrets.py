"""Issue 15, point 4: ``--api-key`` on the server's command line and a token in its
environment never show in ``status``, the store (actions, launch record, spans), the doctor's
own log, the server's teed log, the diagnostics snapshot or the support bundle (store and log
tails)."""

from __future__ import annotations

import sqlite3
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from tests.conftest import poll
from tests.integration.test_remediation_live import doctor_for, serve

pytestmark = pytest.mark.integration

KEY, TOKEN = "sk-live-4f9a2c", "hf_SeCrEtToKeN77"


def _cli(*args: str) -> str:
    out = subprocess.run(
        [sys.executable, "-m", "ascend_doctor", *args], capture_output=True, text=True, timeout=120
    )
    return out.stdout + out.stderr


def test_no_secret_leaves_the_server(tmp_path: Path) -> None:
    with doctor_for(tmp_path) as (doc, host):
        host.set_quirk("aicore", "always")
        argv, env = serve(host, 6, "--max-model-len", "8192", "--api-key", KEY)
        doc.start("--", *argv, env={**env, "HF_TOKEN": TOKEN})
        inc = poll(lambda: doc.incident("aicore_error", "escalated"), 90, "the escalation")
        assert any(a.name == "restart" for a in doc.actions(inc.id))
        assert doc.stop() == 0
        teed = (doc.state / "server.log").read_text()
        # the server printed its args (vLLM's log_non_default_args); the teed copy hides the key
        assert "'api_key': ['<redacted>']" in teed and KEY not in teed, teed[:2000]
        assert "'max_model_len': 8192" in teed
        status = _cli("status", "--state-dir", str(doc.state))
        assert "--api-key" in status and KEY not in status and TOKEN not in status
        db = sqlite3.connect(doc.state / "doctor.db")
        dump = "\n".join(db.iterdump())
        db.close()
        assert "<redacted>" in dump and KEY not in dump and TOKEN not in dump
        assert KEY not in doc.log() and TOKEN not in doc.log()
        for copy in (doc.state / "diagnostics").rglob("*"):
            if copy.is_file():
                assert KEY not in copy.read_text(errors="replace"), copy
        bundle = tmp_path / "b.tar.gz"
        _cli("bundle", "--state-dir", str(doc.state), "--output", str(bundle))
        with tarfile.open(bundle) as tar:
            names = tar.getnames()
            blob = b"".join(
                f.read() for m in tar.getmembers() if (f := tar.extractfile(m)) is not None
            )
        assert any("server.log" in n for n in names)
        assert KEY.encode() not in blob and TOKEN.encode() not in blob
