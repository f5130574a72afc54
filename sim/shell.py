"""A simulated Ascend host for a shell session: what docs/quickstart.md uses.

    eval "$(python -m ascend_doctor.sim.shell create ./simhost)"
    ascend-doctor watch -- vllm serve Qwen/Qwen2.5-14B-Instruct --port 8000 ...
    python -m ascend_doctor.sim.shell inject ./simhost 0 heartbeat_lost

``create`` lays out a host (8 healthy 910B3 cards, fake ``npu-smi``, ``msprof`` and ``vllm``
on its ``bin/``, a CANN log root) and prints the ``export`` lines that put a shell on it: the
same commands as on a real Atlas server then reach the simulator, through PATH and
ASCEND_PROCESS_LOG_PATH only.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from ascend_doctor.sim.faults import get_fault
from ascend_doctor.sim.host import SimHost
from ascend_doctor.sim.versions import known_lines


def create(root: Path, devices: int, version: str | None = None) -> SimHost:
    """Lay out a host under ``root`` (``vllm`` on its PATH beside ``npu-smi``)."""
    return SimHost.create(root, devices=devices, vllm_version=version)


def exports(host: SimHost) -> str:
    """Shell lines that point a session at ``host``."""
    lines = []
    for name, value in host.env().items():
        quoted = (
            shlex.quote(str(host.bin_dir)) + ':"$PATH"' if name == "PATH" else shlex.quote(value)
        )
        lines.append(f"export {name}={quoted}")
    return "\n".join(lines) + "\n"


def _host_at(root: Path) -> SimHost:
    root = root.resolve()
    state = root / "state" / "npu.json"
    if not state.exists():
        raise SystemExit(f"{root}: no simulated host here (run: create {root})")
    return SimHost(root, root / "bin", state, root / "ascend" / "log", state.parent / "npu-smi.log")


def main(argv: list[str] | None = None) -> int:
    """``create DIR [--devices N]`` or ``inject DIR DEVICE FAULT``."""
    parser = argparse.ArgumentParser(prog="python -m ascend_doctor.sim.shell")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_create = sub.add_parser("create", help="lay out a host and print the export lines")
    p_create.add_argument("root", type=Path)
    p_create.add_argument("--devices", type=int, default=8)
    p_create.add_argument(
        "--sim-version",
        default=None,
        help=f"vLLM / vLLM-Ascend release line to install ({', '.join(known_lines())})",
    )
    p_inject = sub.add_parser("inject", help="put a fault on a device of a host")
    p_inject.add_argument("root", type=Path)
    p_inject.add_argument("device", type=int)
    p_inject.add_argument("fault", help="heartbeat_lost or hbm_ecc")
    args = parser.parse_args(argv)
    if args.cmd == "create":
        try:
            host = create(args.root, args.devices, args.sim_version)
        except ValueError as exc:
            parser.error(str(exc))
        sys.stdout.write(exports(host))
        return 0
    try:
        get_fault(args.fault)
        _host_at(args.root).inject(args.device, args.fault)
    except ValueError as exc:
        parser.error(str(exc))
    print(f"device {args.device}: {args.fault}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

__all__ = ["create", "exports", "main"]
