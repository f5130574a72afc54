from pathlib import Path

from ascend_doctor.core.launch import LaunchSpec
from ascend_doctor.core.store import Override

SPEC = LaunchSpec(
    ("vllm", "serve", "m", "--max-model-len", "32768", "--port=8001", "--tensor-parallel-size", "2")
)


def test_flag_forms() -> None:
    assert SPEC.flag("--max-model-len") == "32768"
    assert SPEC.flag("--port") == "8001"
    assert SPEC.flag("--block-size") is None


def test_with_flag_replaces_both_forms() -> None:
    s = SPEC.with_flag("--max-model-len", "16128").with_flag("--port", "9000")
    assert s.argv.count("--max-model-len") == 1
    assert s.flag("--max-model-len") == "16128"
    assert s.flag("--port") == "9000"
    assert "--port=8001" not in s.argv


def test_apply_overrides_in_order() -> None:
    s = SPEC.apply(
        [
            Override("--max-model-len", "arg", "16128", 1, 1.0),
            Override("--enforce-eager", "flag", "", 2, 2.0),
            Override("PYTORCH_NPU_ALLOC_CONF", "env", "expandable_segments:True", 3, 3.0),
        ]
    )
    assert s.flag("--max-model-len") == "16128"
    assert s.has_flag("--enforce-eager")
    assert s.env == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}


def test_devices_from_visible_devices_and_tp() -> None:
    assert SPEC.devices({"ASCEND_RT_VISIBLE_DEVICES": "4,5,6"}) == [4, 5]
    assert SPEC.devices({}) == [0, 1]
    assert LaunchSpec(("vllm", "serve", "m")).devices({"ASCEND_RT_VISIBLE_DEVICES": "3"}) == [3]


def test_health_url() -> None:
    assert SPEC.health_base_url() == "http://127.0.0.1:8001"
    assert LaunchSpec(("v", "--host", "0.0.0.0")).health_base_url() == "http://127.0.0.1:8000"


def test_profiler_switch_follows_the_release(tmp_path: Path) -> None:
    from ascend_doctor.core.config import ProfilingConfig
    from ascend_doctor.core.launch import profiler_flag, server_spec, version_probe

    assert [profiler_flag(v) for v in (None, "", "0.11.0", "0.12.0", "0.13.0", "v0.23.0")] == [
        False, False, False, False, True, True,
    ]  # fmt: skip
    base = LaunchSpec(("vllm", "serve", "m"))
    on = ProfilingConfig(enabled=True)
    old = server_spec(base, [], on, tmp_path, None, "0.11.0")
    assert old.flag("--profiler-config") is None
    assert old.env["VLLM_TORCH_PROFILER_DIR"] == str(tmp_path)
    unknown = server_spec(base, [], on, tmp_path, None, None)
    assert unknown.flag("--profiler-config") is None  # never an unknown flag: exit 2
    new = server_spec(base, [], on, tmp_path, None, "0.18.0")
    assert '"torch_profiler_dir"' in (new.flag("--profiler-config") or "")
    assert "VLLM_TORCH_PROFILER_DIR" not in new.env
    assert version_probe(("python", "-m", "x", "serve", "m", "--port", "1")) == [
        "python", "-m", "x", "--version",
    ]  # fmt: skip
    assert version_probe(("my-wrapper", "--port", "1")) is None
