"""Issue 15, point 3: subprocess output is capped; a runaway npu-smi cannot make the daemon
hold (and then join and parse) hundreds of megabytes."""

from __future__ import annotations

import sys
from pathlib import Path

from ascend_doctor.collectors.npu_smi import MAX_OUTPUT, run_npu_smi


async def test_a_flood_of_output_is_capped(tmp_path: Path) -> None:
    flood = tmp_path / "npu-smi"
    flood.write_text(
        f"#!{sys.executable}\nimport sys\nblock = b'x' * (1 << 20)\n"
        "for _ in range(64):\n    sys.stdout.buffer.write(block)\n"
    )
    flood.chmod(0o755)
    result = await run_npu_smi(str(flood), ["info"], timeout=60)
    assert result.returncode == 0
    assert len(result.stdout) <= MAX_OUTPUT < 64 << 20
