"""Issue 15, point 4: the server's own secrets stay out of its teed log, evidence and bundle
tails, while the numbers the rules read (``max_tokens=16``, ``max_num_batched_tokens``,
``token_budget``, ``num_tokens``) stay.

The lines are in the formats vLLM prints:
- ``non-default args: {...}``: ``log_non_default_args`` in vllm-project/vllm
  ``vllm/entrypoints/utils.py`` (``logger.info("non-default args: %s", non_default_args)``;
  ``--api-key`` is a list from v0.10, a string before it); older servers printed
  ``args: Namespace(...)`` from ``vllm/entrypoints/openai/api_server.py``.
- the scheduler's and the sampler's reprs (``SamplingParams(n=1, ..., max_tokens=16, ...)``,
  ``vllm/sampling_params.py`` ``__repr__``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ascend_doctor.agent.server_output import HELD_BYTES, OutputTee
from ascend_doctor.core.redact_server import redact_server_text

SECRETS = [
    (
        "(APIServer pid=728) INFO 12-02 08:00:05 [utils.py:233] non-default args: {'model_tag':"
        " '/models/Qwen3-14B', 'api_key': ['sk-live-abc123', 'sk-two-456'], 'model':"
        " '/models/Qwen3-14B', 'max_model_len': 32768, 'max_num_batched_tokens': 8192}",
        ["sk-live-abc123", "sk-two-456"],
        ["'api_key': ['<redacted>']", "'max_num_batched_tokens': 8192", "'max_model_len': 32768"],
    ),
    (
        "INFO 05-06 10:11:12 [api_server.py:1043] non-default args: {'api_key': 'sk-old-1',"
        " 'hf_token': 'hf_AbC', 'max_num_seqs': 64}",
        ["sk-old-1", "hf_AbC"],
        ["'api_key': '<redacted>'", "'hf_token': '<redacted>'", "'max_num_seqs': 64"],
    ),
    (
        "INFO 11-01 10:00:00 api_server.py:585] args: Namespace(host=None, port=8000,"
        " api_key='sk-ns-9', ssl_keyfile=None, max_num_batched_tokens=None)",
        ["sk-ns-9"],
        ["api_key='<redacted>'", "ssl_keyfile=None", "max_num_batched_tokens=None"],
    ),
    (
        "subprocess.CalledProcessError: Command '['vllm', 'serve', '/m', '--api-key', 'sk-c1',"
        " '--max-num-batched-tokens', '8192']' returned non-zero exit status 1.",
        ["sk-c1"],
        ["'--api-key', '<redacted>'", "'--max-num-batched-tokens', '8192'"],
    ),
    (
        "ValueError: bad launch: vllm serve /m --api-key sk-c2 --hf-token=hf_c3 --max-tokens 16",
        ["sk-c2", "hf_c3"],
        ["--api-key <redacted>", "--hf-token=<redacted>", "--max-tokens 16"],
    ),
    (
        "environ: HF_TOKEN=hf_env1 VLLM_API_KEY=sk-env2 AWS_SECRET_ACCESS_KEY=aws3 NUM_TOKENS=5",
        ["hf_env1", "sk-env2", "aws3"],
        ["HF_TOKEN=<redacted>", "NUM_TOKENS=5"],
    ),
    (
        "headers: {'Authorization': 'Bearer sk-h1'} x-api-key: sk-h2 access_token: tok-h3",
        ["sk-h1", "sk-h2", "tok-h3"],
        ["Bearer <redacted>"],
    ),
    (
        "downloading from https://user:pa55w0rd@mirror.example/models",
        ["pa55w0rd"],
        ["https://user:<redacted>@mirror.example"],
    ),
]

KEPT = [
    "INFO 12-02 08:00:09 [logger.py:41] SamplingParams(n=1, temperature=0.0, max_tokens=16,"
    " min_tokens=0, skip_special_tokens=True)",
    "WARNING 12-02 08:00:09 [scheduler.py:120] token_budget=100 num_tokens=512 exceeds budget",
    "INFO 12-02 08:00:09 [arg_utils.py:1284] max_num_batched_tokens: 8192, max_tokens: 16",
    "KeyError: 'api_key'",
    "INFO 12-02 08:00:09 [utils.py:233] non-default args: {'api_key': None, 'max_num_seqs': 1}",
]


@pytest.mark.parametrize(("line", "secrets", "shown"), SECRETS)
def test_a_secret_in_the_servers_output_is_redacted(
    line: str, secrets: list[str], shown: list[str]
) -> None:
    for text in (line, line.encode()):
        out = redact_server_text(text)
        out_s = out.decode() if isinstance(out, bytes) else out
        for secret in secrets:
            assert secret not in out_s, out_s
        for kept in shown:
            assert kept in out_s, out_s


@pytest.mark.parametrize("line", KEPT)
def test_token_counts_and_budgets_are_kept(line: str) -> None:
    assert redact_server_text(line) == line
    assert redact_server_text(line.encode()) == line.encode()


def test_the_tee_writes_whole_lines_redacted_and_hands_them_on(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    tee = OutputTee(log, echo=False)
    line = SECRETS[0][0].encode() + b"\n"
    cut = line.index(b"sk-live") + 4  # the key arrives in two reads
    assert tee.feed(line[:cut]) == b""
    assert tee.feed(line[cut:] + b"INFO max_tokens=16\n") == line + b"INFO max_tokens=16\n"
    tee.feed(b"x" * (HELD_BYTES + 1))  # a line without end is written, not held for ever
    tee.close()
    data = log.read_bytes()
    assert b"sk-live" not in data and b"'api_key': ['<redacted>']" in data
    assert b"INFO max_tokens=16\n" in data and data.endswith(b"x" * 100)
    assert log.stat().st_mode & 0o777 == 0o600


def test_a_log_file_that_cannot_be_opened_loses_the_copy_not_the_output(tmp_path: Path) -> None:
    tee = OutputTee(tmp_path / "no-such-dir" / "server.log", echo=False)
    assert tee.feed(b"INFO still read\n") == b"INFO still read\n"
    tee.close()
