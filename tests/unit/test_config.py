from pathlib import Path

import pytest

from ascend_doctor.core.config import Config
from ascend_doctor.core.config_file import load_config
from ascend_doctor.core.errors import ConfigError


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "doctor.toml"
    p.write_text(text)
    return p


def test_defaults_without_file() -> None:
    cfg = load_config(None)
    assert cfg == Config()
    assert cfg.remediation.mode == "auto"
    assert cfg.remediation.allow_device_reset is False
    assert cfg.server.start_timeout >= 600


def test_values_are_read(tmp_path: Path) -> None:
    cfg = load_config(
        write(tmp_path, '[server]\nstart_timeout = 30\n[collectors.npu_smi]\npath = "/x/npu-smi"\n')
    )
    assert cfg.server.start_timeout == 30.0
    assert cfg.collectors.npu_smi.path == "/x/npu-smi"


def test_wrong_type_names_file_line_key_value(tmp_path: Path) -> None:
    p = write(
        tmp_path, '[server]\nstart_timeout = 10\n\n[remediation]\nmin_max_model_len = "abc"\n'
    )
    with pytest.raises(ConfigError) as err:
        load_config(p)
    assert str(err.value) == (
        f"{p}:5: config 'remediation.min_max_model_len' is 'abc': expected an integer"
    )


def test_unknown_key_lists_known(tmp_path: Path) -> None:
    p = write(tmp_path, "[collectors.npu_smi]\ntimeout = 3\nbogus = 1\n")
    with pytest.raises(ConfigError, match=r":3: unknown config key 'collectors.npu_smi.bogus'"):
        load_config(p)


def test_bad_choice(tmp_path: Path) -> None:
    p = write(tmp_path, '[remediation]\nmode = "yolo"\n')
    with pytest.raises(ConfigError, match="expected one of auto, suggest, off"):
        load_config(p)


def test_invalid_toml(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="invalid TOML"):
        load_config(write(tmp_path, "[server\n"))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.toml")
