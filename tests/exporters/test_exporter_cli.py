"""`rackplane exporter nvml | dcgm` as a user runs them (no broker: `--once`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from tests.exporters.fake_nvml import FakeNvml

FIXTURES = Path(__file__).parent.parent / "fixtures"
SAMPLE = FIXTURES / "dcgm" / "dcgm_exporter_sample.prom"
runner = CliRunner()


def test_dcgm_once_json_prints_every_value_with_its_unit_per_gpu() -> None:
    result = runner.invoke(app, ["exporter", "dcgm", "--file", str(SAMPLE), "--once", "--json"])
    assert result.exit_code == 0, result.output
    gpus = json.loads(result.stdout)
    assert {(g["node"], g["gpu"]) for g in gpus} == {("424773df46e0", 0), ("551bdf382151", 0)}
    first = next(g for g in gpus if g["node"] == "424773df46e0")
    assert first["uuid"] == "GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"
    assert first["model"] == "Tesla T4"
    assert first["values"]["temperature_c"] == {"value": 25.0, "unit": "C"}
    assert first["values"]["power_w"] == {"value": 8.969, "unit": "W"}
    assert first["values"]["ecc_uncorrected"] == {"value": None, "unit": "errors"}


def test_dcgm_once_prints_a_table() -> None:
    result = runner.invoke(
        app, ["exporter", "dcgm", "--file", str(SAMPLE), "--once"], env={"COLUMNS": "120"}
    )
    assert result.exit_code == 0, result.output
    assert "temperature_c" in result.stdout and "unsupported" in result.stdout


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param([], "exactly one of --scrape URL or --file FILE", id="no-source"),
        pytest.param(["--file", "x", "--scrape", "http://h:9400/metrics"], "exactly one",
                     id="two-sources"),
        pytest.param(["--file", "/nonexistent.prom"], "cannot read /nonexistent.prom",
                     id="missing-file"),
        pytest.param(["--scrape", "http://127.0.0.1:9/metrics"], "cannot read http://",
                     id="unreachable-exporter"),
    ],
)  # fmt: skip
def test_dcgm_bad_input_gets_a_clear_error(args: list[str], want: str) -> None:
    result = runner.invoke(app, ["exporter", "dcgm", *args, "--once"])
    assert result.exit_code == 2
    assert want in " ".join(result.stderr.split())


def test_dcgm_a_file_without_gpu_readings_is_refused(tmp_path: Path) -> None:
    empty = tmp_path / "empty.prom"
    empty.write_text("# HELP up\n# TYPE up gauge\nup 1\n")
    result = runner.invoke(app, ["exporter", "dcgm", "--file", str(empty), "--once"])
    assert result.exit_code == 2 and "no GPU readings" in " ".join(result.stderr.split())


def test_dcgm_a_bad_interval_is_refused() -> None:
    result = runner.invoke(app, ["exporter", "dcgm", "--file", str(SAMPLE), "--interval", "soon"])
    assert result.exit_code == 2 and "expected a positive duration" in " ".join(
        result.stderr.split()
    )


def test_nvml_once_json_reads_the_gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeNvml()
    fake.i = 15  # under load
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    result = runner.invoke(app, ["exporter", "nvml", "--node", "h200", "--once", "--json"])
    assert result.exit_code == 0, result.output
    (g,) = json.loads(result.stdout)
    assert (g["node"], g["gpu"], g["model"]) == ("h200", 0, "NVIDIA H200")
    assert g["values"]["clock_event_reasons"] == {"value": 4, "unit": "bitmask"}
    assert g["values"]["nvlink_down"]["value"] is None
    assert not fake.initialised  # NVML shut down


def test_nvml_without_a_driver_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    import pynvml

    def no_driver() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_DRIVER_NOT_LOADED)

    # The same on every machine, with or without a GPU: the driver is made to be missing.
    monkeypatch.setattr(pynvml, "nvmlInit", no_driver)
    result = runner.invoke(app, ["exporter", "nvml", "--node", "n1", "--once"])
    assert result.exit_code == 2
    assert "is the NVIDIA driver loaded?" in " ".join(result.stderr.split())
