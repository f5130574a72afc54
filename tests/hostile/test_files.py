"""Issue 15, point 2: a hostile log root. Symlinks out of the roots (to /etc/shadow) are never
read, FIFOs and devices never opened for reading in a way that blocks, nothing of them copied;
what the doctor keeps is 0700 / 0600 whatever the umask; secrets never reach a copy."""

from __future__ import annotations

import asyncio
import os
import stat
import tarfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from ascend_doctor.agent.remediation import Context, HostTools
from ascend_doctor.agent.remediation.context import Evidence
from ascend_doctor.agent.remediation.device_actions import collect_diagnostics
from ascend_doctor.cli.bundle import build_bundle
from ascend_doctor.collectors.evidence import Keeper
from ascend_doctor.collectors.log_files import Checkpoint, Checkpoints, Source
from ascend_doctor.collectors.logs import Tailer
from ascend_doctor.core.config import RemediationConfig
from ascend_doctor.core.events import Category, Incident, IncidentState, Severity
from ascend_doctor.core.launch import LaunchSpec
from ascend_doctor.core.safeio import UnsafeFile, open_regular
from ascend_doctor.core.store import Store
from tests.fakes import FakeServer

SECRET = b"root:$6$very-secret-hash:19000:0:99999:7:::\n"


class Mem(Checkpoints):
    def __init__(self) -> None:
        self.saved: dict[str, Checkpoint] = {}

    def get(self, identity: str) -> Checkpoint | None:
        return self.saved.get(identity)

    def by_head(self, head: str) -> Checkpoint | None:
        return None

    def put(self, items: list[tuple[str, str, Checkpoint]]) -> None:
        for identity, _path, checkpoint in items:
            self.saved[identity] = checkpoint


@pytest.fixture
def hostile(tmp_path: Path) -> Iterator[Path]:
    """A log root with a good log, a link to a secret, a FIFO, a link to /dev/zero, and a
    kubelet-style link into an allowed root."""
    secret = tmp_path / "etc" / "shadow"
    secret.parent.mkdir()
    secret.write_bytes(SECRET)
    root = tmp_path / "logs"
    root.mkdir()
    (root / "good.log").write_bytes(b"hello\n")
    (root / "shadow.log").symlink_to(secret)
    os.mkfifo(root / "fifo.log")
    (root / "zero.log").symlink_to("/dev/zero")
    pods = tmp_path / "pods" / "ns_pod" / "c"
    pods.mkdir(parents=True)
    (pods / "0.log").write_bytes(b"from the pod\n")
    (root / "pod.log").symlink_to(pods / "0.log")
    old = os.umask(0o022)
    try:
        yield tmp_path
    finally:
        os.umask(old)


def _in_thread(fn: object, timeout: float = 20.0) -> object:
    """Run ``fn`` in a thread; a call that blocks (a FIFO opened for reading) fails the test
    instead of hanging it."""
    out: list[object] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            out.append(fn())  # type: ignore[operator]
        except BaseException as exc:
            errors.append(exc)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    t.join(timeout)
    assert not t.is_alive(), "blocked: a FIFO or a device was opened for reading"
    if errors:
        raise errors[0]
    return out[0]


def test_the_tailer_reads_only_regular_files_under_its_roots(hostile: Path) -> None:
    root = hostile / "logs"
    tailer = Tailer(
        [Source(str(root / "*.log"), "server")],
        Mem(),
        read_from="beginning",
        roots=[str(hostile / "pods")],
    )
    chunks = _in_thread(tailer.poll)
    data = b"".join(c.data for c in chunks)  # type: ignore[attr-defined]
    assert b"hello" in data and b"from the pod" in data, "kubelet's links keep working"
    assert b"very-secret" not in data
    followed = {Path(p).name for p in tailer.paths()}
    assert followed == {"good.log", "pod.log"}
    assert tailer.stats.errors >= 3  # the link out, the FIFO, the device: counted
    tailer.close()


@pytest.mark.parametrize("name", ["shadow.log", "fifo.log", "zero.log"])
def test_open_regular_refuses_without_blocking(hostile: Path, name: str) -> None:
    path = hostile / "logs" / name
    with pytest.raises(UnsafeFile):
        _in_thread(lambda: open_regular(path, [str(hostile / "logs")]))


async def test_diagnostics_copy_nothing_unsafe_and_keep_copies_private(hostile: Path) -> None:
    store = Store.in_dir(hostile / "state")
    root = hostile / "logs"
    (root / "good.log").write_bytes(b"vllm serve m --api-key sk-live-123 --port 8000\n")
    ctx = Context(
        config=RemediationConfig(),
        store=store,
        server=FakeServer(lambda: LaunchSpec(("vllm",))),
        host=HostTools(
            npu_smi=str(hostile / "no-npu-smi"),
            evidence=Keeper(
                hostile / "state" / "diagnostics",
                keep=5,
                max_bytes=1 << 24,
                pids=list,
                devices=lambda: [0],
                log_paths=lambda: [str(root / n) for n in sorted(os.listdir(root))],
                npu_smi=str(hostile / "no-npu-smi"),
                metrics_url=lambda: "",
                py_spy=None,
            ),
        ),
        sleep=lambda s: asyncio.sleep(0),
        clock=lambda: 1000.0,
    )
    inc = Incident(1, Category.DEVICE_FAULT, "npu0", IncidentState.OPEN, Severity.CRITICAL,
                   "r", "s", 1000.0)  # fmt: skip
    done = await asyncio.wait_for(collect_diagnostics(ctx, inc, {}, Evidence({})), 20)
    out = Path(done.params["dir"])
    copied = {p.name: p for p in out.iterdir()}
    assert not any("shadow" in n or "fifo" in n or "zero" in n for n in copied), copied
    for p in [out, out.parent]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o700, p
    for p in copied.values():
        assert stat.S_IMODE(p.stat().st_mode) == 0o600, p
        assert b"very-secret" not in p.read_bytes() and b"sk-live-123" not in p.read_bytes()
    store.close()


def test_store_and_bundle_are_private_and_carry_no_secret(hostile: Path) -> None:
    state = hostile / "state"
    store = Store.in_dir(state)
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "doctor.db").stat().st_mode) == 0o600
    # the tailer once followed these (or an attacker swapped them in since)
    root = hostile / "logs"
    store.set_offsets([("1:1", str(root / "shadow.log"), 1, "", ""),
                       ("1:2", str(root / "fifo.log"), 1, "", "")])  # fmt: skip
    (state / "server.log").write_bytes(
        b"INFO 01-01 00:00:00 [api_server.py:1] non-default args: {'api_key': 'sk-live-9'}\n"
    )
    store.close()
    out = hostile / "bundle.tar.gz"
    manifest = _in_thread(lambda: build_bundle(state, out, npu_smi=str(hostile / "none")))
    assert stat.S_IMODE(out.stat().st_mode) == 0o600
    with tarfile.open(out) as tar:
        blob = b"".join(f.read() for m in tar.getmembers() if (f := tar.extractfile(m)) is not None)
    assert b"very-secret" not in blob and b"sk-live-9" not in blob
    skipped = {s["source"] for s in manifest["skipped"]}  # type: ignore[index]
    assert {str(root / "shadow.log"), str(root / "fifo.log")} <= skipped
