"""rules/drain.py mines the templates drain3's TemplateMiner mines, without its package's
eager imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from ascend_doctor.rules.drain import MASKING, Miner

ROOT = Path(__file__).parent.parent


def _messages() -> list[str]:
    out = []
    for name in ("failures.jsonl", "benign.jsonl"):
        for raw in (ROOT / "corpus" / "dev" / name).read_text(encoding="utf-8").splitlines():
            out += json.loads(raw)["text"].splitlines()
    return out


def test_the_same_templates_in_the_same_order_as_template_miner() -> None:
    from drain3 import TemplateMiner
    from drain3.masking import MaskingInstruction
    from drain3.template_miner_config import TemplateMinerConfig

    config = TemplateMinerConfig()
    config.profiling_enabled = False
    config.masking_instructions = [MaskingInstruction(p, n) for p, n in MASKING]
    config.drain_sim_th = 0.5
    reference = TemplateMiner(config=config)
    miner = Miner(0.5, MASKING)
    messages = _messages() * 2  # a second time: each joins the cluster it made
    assert len(messages) > 1000
    templates = set()
    for message in messages:
        want = reference.add_log_message(message)["template_mined"]
        assert miner.template(message) == want, message
        templates.add(want)
    assert any("<NUM>" in t for t in templates) and any("<*>" in t for t in templates)


def test_a_miner_leaves_drain3_whole_and_skips_its_persistence() -> None:
    # in a fresh interpreter: mining imports neither jsonpickle nor drain3's TemplateMiner,
    # and drain3.TemplateMiner still imports when asked for
    code = (
        "import sys\n"
        "from ascend_doctor.rules.drain import MASKING, Miner\n"
        "assert Miner(0.5, MASKING).template('error 12 at 0x1f') == 'error <NUM> at <HEX>'\n"
        "assert 'jsonpickle' not in sys.modules and 'drain3.template_miner' not in sys.modules\n"
        "import drain3\n"
        "from drain3 import TemplateMiner\n"
        "assert drain3.TemplateMiner is TemplateMiner and 'jsonpickle' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
