"""The settings model: layers in order (defaults < file < env < flags), secrets masked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import faust
import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.config import (
    POLICY_AGENTS,
    ConfigError,
    load_settings,
    masked,
    render_config_doc,
)
from rackplane.models import PolicySettings

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No RACKPLANE_* variable of the machine running the tests leaks in."""
    import os

    for name in list(os.environ):
        if name.upper().startswith("RACKPLANE_"):
            monkeypatch.delenv(name)


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "rackplane.yaml"
    path.write_text(text)
    return path


@pytest.mark.parametrize(
    ("file", "env", "flag", "want", "want_origin"),
    [
        pytest.param(None, None, None, "kafka://127.0.0.1:9092", "default", id="the default"),
        pytest.param("kafka://file:9092", None, None, "kafka://file:9092", "file",
                     id="the file overrides the default"),
        pytest.param("kafka://file:9092", "kafka://env:9092", None, "kafka://env:9092", "env",
                     id="the environment overrides the file"),
        pytest.param("kafka://file:9092", "kafka://env:9092", "kafka://flag:9092",
                     "kafka://flag:9092", "flag", id="a flag overrides the environment"),
        pytest.param(None, None, "kafka://flag:9092", "kafka://flag:9092", "flag",
                     id="a flag overrides the default"),
    ],
)  # fmt: skip
def test_each_layer_overrides_the_one_below(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    file: str | None,
    env: str | None,
    flag: str | None,
    want: str,
    want_origin: str,
) -> None:
    path = write(tmp_path, f"broker: {file}\n") if file else None
    if env:
        monkeypatch.setenv("RACKPLANE_BROKER", env)
    loaded = load_settings(path, {"broker": flag})
    assert loaded.settings.broker == want
    assert loaded.origins["broker"] == want_origin


def test_layers_mix_per_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write(tmp_path, "partitions: 12\nreplication: 3\ntopic_prefix: prod\n")
    monkeypatch.setenv("RACKPLANE_REPLICATION", "2")
    s = load_settings(path, {"topic_prefix": "flagged", "partitions": None}).settings
    assert (s.partitions, s.replication, s.topic_prefix) == (12, 2, "flagged")


def test_the_config_file_may_come_from_rackplane_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RACKPLANE_CONFIG", str(write(tmp_path, "app_id: fleet-a\n")))
    loaded = load_settings()
    assert loaded.settings.app_id == "fleet-a"
    assert loaded.file == tmp_path / "rackplane.yaml"


def test_policies_from_the_environment_may_be_comma_separated(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RACKPLANE_POLICIES", "tas, spare_swap")
    assert load_settings().settings.policies == ("tas", "spare_swap")


def test_the_environment_is_read_as_pydantic_settings_read_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Names in any case; lists, mappings and models as JSON; a model's fields one by one over
    its JSON, over the file's; a variable that names no setting is not read."""
    monkeypatch.setenv("rackplane_Partitions", "3")
    monkeypatch.setenv("RACKPLANE_LOG_KEYS", '["a2V5"]')
    monkeypatch.setenv("RACKPLANE_POLICY", '{"slice_size": 4, "spares_per_rack": 2}')
    monkeypatch.setenv("RACKPLANE_POLICY__SPARES_PER_RACK", "1")
    monkeypatch.setenv("RACKPLANE_POLICY__XID_ACTIONS", '{"79": "drain_and_replace"}')
    monkeypatch.setenv("RACKPLANE_NO_SUCH_SETTING", "x")
    path = write(tmp_path, "policy:\n  borrow_spares: true\n  slice_size: 8\n")
    s = load_settings(path).settings
    assert s.partitions == 3
    assert s.log_keys == ("a2V5",)
    assert (s.policy.slice_size, s.policy.spares_per_rack, s.policy.borrow_spares) == (4, 1, True)
    assert s.policy.xid_actions[79].value == "drain_and_replace"
    assert s.policy.model_fields_set == {
        "slice_size", "spares_per_rack", "borrow_spares", "xid_actions"
    }  # fmt: skip


@pytest.mark.parametrize(
    ("name", "value", "want"),
    [
        ("RACKPLANE_LOG_KEYS", "a2V5", "RACKPLANE_LOG_KEYS: not valid JSON"),
        ("RACKPLANE_POLICY__ADMINS", "operator:alice", "RACKPLANE_POLICY__ADMINS: not valid JSON"),
        ("RACKPLANE_POLICY__NO_SUCH_FIELD", "1",
         "policy.no_such_field: not a rackplane setting (docs/CONFIG.md lists them) (from the "
         "environment: "
         "RACKPLANE_POLICY__NO_SUCH_FIELD)"),
    ],
)  # fmt: skip
def test_a_variable_the_model_cannot_read_is_refused_by_name(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, want: str
) -> None:
    monkeypatch.setenv(name, value)
    with pytest.raises(ConfigError) as err:
        load_settings()
    assert want in str(err.value)


def test_policy_overrides_apply_over_the_cluster_file_field_by_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, "policy:\n  spares_per_rack: 1\n")
    monkeypatch.setenv("RACKPLANE_POLICY__ADMINS", '["operator:alice"]')
    s = load_settings(path).settings
    from_file = PolicySettings(slice_size=8, spares_per_rack=3, borrow_spares=True)
    merged = s.policy_over(from_file)
    assert merged.admins == ("operator:alice",)
    assert merged.spares_per_rack == 1
    assert (merged.slice_size, merged.borrow_spares) == (8, True)


@pytest.mark.parametrize(
    ("text", "env", "want"),
    [
        pytest.param("brokers: kafka://x:1\n", {}, "brokers: not a rackplane setting",
                     id="an unknown key in the file"),
        pytest.param("partitions: -1\n", {}, "partitions: Input should be greater than",
                     id="a bad value in the file names the file"),
        pytest.param("", {"RACKPLANE_WEB_PORT": "http"}, "RACKPLANE_WEB_PORT",
                     id="a bad value in the environment names the variable"),
        pytest.param("broker: localhost:9092\n", {}, "expected kafka://host:port",
                     id="a broker without the kafka scheme"),
        pytest.param("policies: tas,magic\n", {}, "unknown policies ['magic']",
                     id="an unknown policy agent"),
        pytest.param("kafka_security_protocol: SASL_SSL\n", {}, "needs kafka_sasl_username",
                     id="SASL without credentials"),
        pytest.param("[1, 2]\n", {}, "expected a mapping", id="a file that is a list"),
        pytest.param("broker: [\n", {}, "not valid YAML", id="a file that is not YAML"),
    ],
)  # fmt: skip
def test_bad_configuration_is_refused_with_the_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str, env: dict[str, str], want: str
) -> None:
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    path = write(tmp_path, text)
    with pytest.raises(ConfigError) as err:
        load_settings(path)
    assert want in str(err.value)


def test_a_bad_value_in_the_file_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, "partitions: 0\n")
    with pytest.raises(ConfigError, match=r"partitions: .* \(in .*rackplane.yaml\)"):
        load_settings(path)


def test_a_missing_config_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no-such\.yaml"):
        load_settings(tmp_path / "no-such.yaml")


SASL_ENV = {
    "RACKPLANE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
    "RACKPLANE_KAFKA_SASL_MECHANISM": "SCRAM-SHA-256",
    "RACKPLANE_KAFKA_SASL_USERNAME": "rackplane",
    "RACKPLANE_KAFKA_SASL_PASSWORD": "s3cr3t-pw",
    "RACKPLANE_KAFKA_SSL_KEY_PASSWORD": "k3y-pw",
}


def test_secrets_are_masked_in_the_effective_configuration(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for k, v in SASL_ENV.items():
        monkeypatch.setenv(k, v)
    s = load_settings().settings
    shown = masked(s)
    assert shown["kafka_sasl_password"] == "****"
    assert shown["kafka_ssl_key_password"] == "****"
    assert shown["kafka_sasl_username"] == "rackplane"
    assert "s3cr3t-pw" not in repr(s) + str(s) + json.dumps(shown)
    assert "s3cr3t-pw" not in repr(s.stream_config())


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_config_show_masks_every_secret(monkeypatch: pytest.MonkeyPatch, as_json: bool) -> None:
    for k, v in SASL_ENV.items():
        monkeypatch.setenv(k, v)
    result = runner.invoke(app, ["config", "show", *(["--json"] if as_json else [])])
    assert result.exit_code == 0, result.output
    assert "s3cr3t-pw" not in result.output
    assert "k3y-pw" not in result.output
    if as_json:
        shown = json.loads(result.stdout)["settings"]
        assert shown["kafka_sasl_password"] == "****"
    else:
        assert "kafka_sasl_password" in result.stdout
        assert "****" in result.stdout


def test_config_show_says_where_each_value_came_from(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RACKPLANE_PARTITIONS", "8")
    path = write(tmp_path, "replication: 3\n")
    result = runner.invoke(app, ["config", "show", "--config", str(path)])
    assert result.exit_code == 0, result.output
    rows = {line.split("│")[1].strip(): line for line in result.stdout.splitlines() if "│" in line}
    assert rows["partitions"].rstrip("│ ").endswith("env")
    assert rows["replication"].rstrip("│ ").endswith("file")
    assert rows["broker"].rstrip("│ ").endswith("default")


def test_config_show_refuses_a_bad_file_without_a_traceback(tmp_path: Path) -> None:
    result = runner.invoke(app, ["config", "show", "--config", str(write(tmp_path, "x: 1\n"))])
    assert result.exit_code == 2
    assert "not a rackplane setting" in result.stderr
    assert "Traceback" not in result.output


def test_security_settings_reach_aiokafka_and_faust(monkeypatch: pytest.MonkeyPatch) -> None:
    for k, v in SASL_ENV.items():
        monkeypatch.setenv(k, v)
    config = load_settings().settings.stream_config()
    options: dict[str, Any] = config.kafka_options()
    assert options["security_protocol"] == "SASL_PLAINTEXT"
    assert options["sasl_mechanism"] == "SCRAM-SHA-256"
    assert (options["sasl_plain_username"], options["sasl_plain_password"]) == (
        "rackplane",
        "s3cr3t-pw",
    )
    credentials = config.security.faust_credentials()
    assert isinstance(credentials, faust.SASLCredentials)
    assert credentials.mechanism.value == "SCRAM-SHA-256"
    assert credentials.password == "s3cr3t-pw"


def test_tls_builds_an_ssl_context_that_checks_the_broker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RACKPLANE_KAFKA_SECURITY_PROTOCOL", "SSL")
    config = load_settings().settings.stream_config()
    options = config.kafka_options()
    assert options["security_protocol"] == "SSL"
    assert options["ssl_context"].check_hostname is True
    assert isinstance(config.security.faust_credentials(), faust.SSLCredentials)


def test_plaintext_passes_no_credentials() -> None:
    config = load_settings().settings.stream_config()
    assert config.kafka_options() == {
        "bootstrap_servers": "127.0.0.1:9092",
        "security_protocol": "PLAINTEXT",
    }
    assert config.security.faust_credentials() is None


def test_the_settings_name_the_policy_agents_the_worker_has() -> None:
    from rackplane.streams.app import POLICIES

    assert tuple(POLICIES) == POLICY_AGENTS


def test_docs_config_md_lists_every_setting_as_generated() -> None:
    doc = (ROOT / "docs" / "CONFIG.md").read_text()
    assert doc == render_config_doc(), "run `rackplane config doc > docs/CONFIG.md`"
    from rackplane.config import RackplaneSettings

    for name in [*RackplaneSettings.model_fields, *PolicySettings.model_fields]:
        assert f"`{name}`" in doc
