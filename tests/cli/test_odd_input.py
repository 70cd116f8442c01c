"""Odd characters typed at the command line, or in a file, get one line and no traceback.

None of these commands reaches a broker: the input is refused before anything is sent (the
broker below is a port nothing listens on).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.history import DuckDBAuditSink
from rackplane.importers import TopologyFileError, load_cluster_file, parse_k8s_nodes
from rackplane.models import CordonNode, Rack, RegisterTopology, Topology
from rackplane.policies import decide
from rackplane.projections import evolve, initial_state
from tests.cli._output import one_error_line

FIXTURES = Path(__file__).parents[1] / "fixtures"
NOWHERE = ["--broker", "kafka://127.0.0.1:9", "--timeout", "0.1"]
runner = CliRunner()


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param(
            ["cordon", "--node", "n 1", "--cluster", "c1"],
            "node: contains a space (U+0020) at position 1 (expected an id:",
            id="a node id with a space",
        ),
        pytest.param(
            ["cancel", "--job", "j1", "--cluster", "c1", "--reason", "oops\x1b[2J"],
            "reason: contains a control character (U+001B) at position 4",
            id="a reason with an escape sequence",
        ),
        pytest.param(
            ["cancel", "--job", "j1", "--cluster", "c1", "--reason", "r" * 2_001],
            "reason: has 2,001 characters; at most 2,000 are allowed",
            id="a reason one character too long",
        ),
        pytest.param(
            ["cancel", "--job", "j1", "--cluster", "c1", "--actor", "operator:\u202eecila"],
            "actor: contains a bidi control character (U+202E) at position 9",
            id="a spoofed actor",
        ),
        pytest.param(
            ["submit", "--job", "j1", "--nodes", "2", "--cluster", "c1", "--name", "a\u200db"],
            "name: contains a zero-width character (U+200D) at position 1",
            id="a job name with a zero-width joiner",
        ),
        pytest.param(
            ["health", "--node", "n1", "--state", "failed", "--cluster", "c\x00"],
            "cluster: contains a NUL character (U+0000) at position 1",
            id="a cluster id with a NUL",
        ),
    ],
)
def test_odd_input_is_refused_in_one_line_before_anything_is_sent(
    args: list[str], want: str
) -> None:
    line = one_error_line(runner.invoke(app, [*args, *NOWHERE]))
    assert want in line


@pytest.mark.parametrize("user", ["jörg", "ali ce", "\u202eroot"])
def test_a_user_name_that_cannot_make_an_actor_asks_for_one(user: str) -> None:
    env: dict[str, str | None] = {"RACKPLANE_ACTOR": None, "RACKPLANE_CONFIG": None}
    env |= dict.fromkeys(("LOGNAME", "USER", "LNAME", "USERNAME"), user)  # getpass's order
    result = runner.invoke(app, ["uncordon", "--node", "n1", "--cluster", "c1", *NOWHERE], env=env)
    line = one_error_line(result)
    assert "cannot make an actor" in line
    assert "pass --actor or set RACKPLANE_ACTOR" in line
    assert "\u202e" not in line  # named, never printed


def test_an_actor_in_the_environment_outside_the_alphabet_names_the_variable() -> None:
    env = {"RACKPLANE_ACTOR": "operator:\u202eecila"}
    result = runner.invoke(app, ["uncordon", "--node", "n1", "--cluster", "c1", *NOWHERE], env=env)
    line = one_error_line(result)
    assert "actor: contains a bidi control character (U+202E) at position 9" in line
    assert "RACKPLANE_ACTOR" in line


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param(["--node", "gb 01"], "--node: contains a space (U+0020)", id="a bad node"),
        pytest.param(["--cluster", "c/\u2066"], "--cluster: contains a bidi", id="a bad cluster"),
    ],
)
def test_the_dcgm_exporter_refuses_an_odd_node_or_cluster_option(
    args: list[str], want: str
) -> None:
    sample = FIXTURES / "dcgm" / "dcgm_exporter_sample.prom"
    result = runner.invoke(app, ["exporter", "dcgm", "--file", str(sample), "--once", *args])
    assert want in one_error_line(result)


def test_a_cluster_file_naming_a_spoofed_admin_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        'cluster: c1\nracks:\n  - {id: r1, nodes: "n[1-4]"}\n'
        'policy:\n  admins: ["operator:alice", "operator:\\u202eecila"]\n'
    )
    with pytest.raises(TopologyFileError) as caught:
        load_cluster_file(path)
    assert str(caught.value) == (
        f"{path}:5: policy.admins[1]: expected an actor: ASCII letters, digits and . _ : / @ + -,"
        " starting with a letter or digit, at most 128 characters (got 'operator:\\u202eecila',"
        " which contains a bidi control character (U+202E) at position 9)"
    )
    result = runner.invoke(app, ["topology", "show", str(path)])
    assert "policy.admins[1]" in one_error_line(result)


def test_a_kubernetes_node_name_with_a_bidi_control_is_refused_in_words() -> None:
    doc = json.loads((FIXTURES / "k8s" / "nodes.json").read_text())
    for node in doc["items"]:
        if node["metadata"]["name"] == "gb-a01":
            node["metadata"]["name"] = "gb-a01\u202e"
    with pytest.raises(
        TopologyFileError, match=r"bidi control character \(U\+202E\) at position 6"
    ):
        parse_k8s_nodes(json.dumps(doc), source="nodes.json")


def test_a_reason_that_looks_like_markup_is_printed_as_it_is(tmp_path: Path) -> None:
    """Free text may hold `[`: the history timeline prints it, it does not interpret it (an
    unbalanced `[/]` used to be a rich MarkupError, a traceback)."""
    now = datetime(2026, 11, 30, 12, tzinfo=UTC)
    topology = Topology(cluster="c1", racks=(Rack(id="r1", nodes=("n1", "n2")),))
    commands = [
        RegisterTopology(id="cli-1", cluster="c1", actor="operator:alice", topology=topology),
        CordonNode(
            id="cli-2", cluster="c1", actor="operator:alice", node="n1", reason="[/] [red]x"
        ),
    ]
    state, events = initial_state("c1"), []
    for command in commands:
        for event in decide(state, command, now=now):
            state = evolve(state, event)
            events.append(event)
    db = tmp_path / "history.duckdb"
    with DuckDBAuditSink(db) as sink:
        sink.record_events(events)
    result = runner.invoke(app, ["history", "node", "n1", "--db", str(db)], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "[/] [red]x" in result.stdout


TYPO = "BlockSizes=18\nBlockName=b1 Nodes=n[01-18]\nBlockName=b2 Nodes=m[01-81]\n"
"""`m[01-81]` for `m[01-18]`: one block of 81 nodes, which no NVLink domain is."""


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["topology", "import", "--slurm"], id="topology import"),
        pytest.param(["slurm", "--cluster", "c1", *NOWHERE[:2], "--topology"], id="slurm"),
    ],
)
def test_a_slurm_block_larger_than_an_nvlink_domain_is_refused_in_one_line(
    tmp_path: Path, command: list[str]
) -> None:
    path = tmp_path / "topology.conf"
    path.write_text(TYPO)
    line = one_error_line(runner.invoke(app, [*command, str(path)]))
    assert f"{path}:3: Nodes: expected a block of at most 18 nodes" in line
    assert "block 'b2' has 81" in line


SUBMIT = ["submit", "--job", "j1", "--nodes", "2", "--cluster", "c1", "--actor", "alice"]


@pytest.fixture
def odd(tmp_path: Path) -> Path:
    """A directory, a binary file, a YAML syntax error, a file where a directory belongs, a JSON
    document."""
    (tmp_path / "adir").mkdir()
    (tmp_path / "binary.bin").write_bytes(b"\xec\x5e\xa3\x9d" * 8)
    (tmp_path / "bad.yaml").write_text("broker: [\n  x: 1\n")
    (tmp_path / "afile").write_text("")
    (tmp_path / "doc.json").write_text('{\n  "kind": "x"\n}\n')
    (tmp_path / "topology.conf").write_text("BlockName=b1 Nodes=n[01-18]\n")
    return tmp_path


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param(
            ["config", "show", "--config", "{d}/binary.bin"],
            "config file {d}/binary.bin: expected UTF-8 text (byte 0 cannot be decoded)",
            id="a binary config file (was UnicodeDecodeError)",
        ),
        pytest.param(
            ["submit", "--cluster", "c1", "--file", "{d}/binary.bin", "--actor", "alice"],
            "{d}/binary.bin: not a text file (expected a YAML list of jobs)",
            id="a binary jobs file (was UnicodeDecodeError)",
        ),
        pytest.param(
            ["simulate", "{d}/binary.bin"],
            "{d}/binary.bin: expected UTF-8 text (byte 0 cannot be decoded)",
            id="a binary scenario file (was UnicodeDecodeError)",
        ),
        pytest.param(
            ["keys", "show", "{d}/binary.bin"],
            "{d}/binary.bin: not a rackplane key file (expected UTF-8 text; byte 0 cannot",
            id="a binary key file (was UnicodeDecodeError)",
        ),
        pytest.param(
            ["exporter", "dcgm", "--file", "{d}/binary.bin", "--cluster", "c1", "--once"],
            "cannot read {d}/binary.bin: expected UTF-8 text (byte 0 cannot be decoded)",
            id="a binary DCGM scrape file (was the codec's message)",
        ),
        pytest.param(
            ["exporter", "dcgm", "--file", "{d}/adir", "--cluster", "c1", "--once"],
            "cannot read {d}/adir: Is a directory",
            id="a DCGM scrape file that is a directory (was [Errno 21] ...)",
        ),
        pytest.param(
            ["exporter", "dcgm", "--file", "{d}/doc.json", "--cluster", "c1", "--once"],
            "{d}/doc.json: not a Prometheus text exposition: expected lines such as",
            id="a DCGM scrape file that is no exposition (the parser said nothing)",
        ),
        pytest.param(
            ["tui", "--demo", "99999999"],
            "--demo tells its story on at most 1,024 racks, not 99,999,999",
            id="a demo on a hundred million racks (ran for ever)",
        ),
        pytest.param(
            ["status", "--timeout", "nan", *NOWHERE[:2]],
            "--timeout: expected a positive number of seconds, got nan",
            id="a read that may stand still NaN seconds (did not wait at all)",
        ),
        pytest.param(
            ["cordon", "--node", "n1", "--cluster", "c1", "--timeout", "-1", *NOWHERE[:2]],
            "--timeout: expected a positive number of seconds, got -1.0",
            id="a command that waits -1 s for its outcome",
        ),
        pytest.param(
            [*SUBMIT, "--expected-duration", "inf", *NOWHERE],
            "--expected-duration: expected a number of minutes, got inf",
            id="a job expected to run for ever (was OverflowError)",
        ),
        pytest.param(
            [*SUBMIT, "--checkpoint-minutes", "nan", *NOWHERE],
            "--checkpoint-minutes: expected a number of minutes, got nan",
            id="a NaN checkpoint interval (said 'cannot convert float NaN to integer')",
        ),
        pytest.param(
            ["register", "{d}/adir", *NOWHERE],
            "{d}/adir: cannot read it (Is a directory)",
            id="register a directory (said [Errno 21] ...)",
        ),
        pytest.param(
            ["keys", "trust", "{d}/binary.bin", "--cluster", "c1", "--role", "admin", *NOWHERE],
            "{d}/binary.bin: not a public key: expected UTF-8 text (byte 0 cannot be decoded)",
            id="keys trust of a binary file (was UnicodeDecodeError)",
        ),
        pytest.param(
            ["history", "verify", "--db", "{d}/h.duckdb", "--log-key", "{d}/binary.bin"],
            "{d}/binary.bin: not a public key: expected UTF-8 text (byte 0 cannot be decoded)",
            id="a binary --log-key file (was the codec's message)",
        ),
        pytest.param(
            ["history", "verify", "--db", "{d}/h.duckdb", "--log-key", "{d}/doc.json"],
            "{d}/doc.json: not a public key (`rackplane keys show --json`): no public_key field",
            id="a --log-key file without a public key (said 'public_key')",
        ),
        pytest.param(
            ["kube", "--cluster", "c1", "--kubeconfig", "{d}/binary.bin", *NOWHERE[:2]],
            "--kubeconfig: {d}/binary.bin: expected UTF-8 text (byte 0 cannot be decoded)",
            id="a binary kubeconfig (said the codec's message)",
        ),
        pytest.param(
            ["kube", "--cluster", "c1", "--kubeconfig", "{d}/afile", *NOWHERE[:2]],
            "--kubeconfig: {d}/afile: expected a kubeconfig (a mapping of clusters, contexts,",
            id="an empty kubeconfig (said 'NoneType' object does not support item assignment)",
        ),
        pytest.param(
            ["kube", "--cluster", "c1", "--kubeconfig", "{d}/bad.yaml", *NOWHERE[:2]],
            "--kubeconfig: {d}/bad.yaml:3: not valid YAML: expected ',' or ']'",
            id="a kubeconfig with a YAML syntax error (was PyYAML's four lines, joined)",
        ),
        pytest.param(
            ["config", "show", "--config", "{d}/bad.yaml"],
            "config file {d}/bad.yaml:3: not valid YAML: expected ',' or ']'",
            id="a config file with a YAML syntax error (was four lines)",
        ),
        pytest.param(
            ["topology", "show", "{d}/adir"],
            "{d}/adir: cannot read it (Is a directory)",
            id="topology show of a directory",
        ),
        pytest.param(
            ["topology", "import", "--slurm", "{d}/topology.conf", "-o", "{d}/adir"],
            "--output: cannot write {d}/adir: Is a directory",
            id="topology import into a directory (was IsADirectoryError)",
        ),
        pytest.param(
            ["topology", "import", "--slurm", "{d}/topology.conf", "-o", "{d}/no/x.yaml"],
            "--output: cannot write {d}/no/x.yaml: No such file or directory",
            id="topology import under a missing directory (was FileNotFoundError)",
        ),
        pytest.param(
            ["capacity", "--racks", "4", "--unavailability", "0.1", "--plot", "{d}/adir"],
            "--plot: cannot write {d}/adir: Is a directory",
            id="a capacity plot into a directory (was IsADirectoryError)",
        ),
        pytest.param(
            ["capacity", "--racks", "4", "--nodes-per-rack", "100000", "--unavailability", "0.1"],
            "a rack of 100,000 nodes is beyond the model: at most 1,024",
            id="a rack of 100,000 nodes (was OverflowError)",
        ),
        pytest.param(
            ["broker", "--log", "{d}/adir"],
            "--log: {d}/adir is a directory; expected a file",
            id="a broker log that is a directory (was IsADirectoryError)",
        ),
        pytest.param(
            ["broker", "--log", "{d}/no/x.log"],
            "--log: cannot write {d}/no/x.log: no directory {d}/no",
            id="a broker log under a missing directory (hung)",
        ),
        pytest.param(
            ["worker", *NOWHERE[:2], "--db", "{d}/adir"],
            "--db: {d}/adir is a directory; expected a file",
            id="a worker history that is a directory",
        ),
        pytest.param(
            ["worker", *NOWHERE[:2], "--data-dir", "{d}/afile"],
            "--data-dir: {d}/afile is a file; expected a directory",
            id="a worker data directory that is a file",
        ),
    ],
)
def test_odd_paths_and_sizes_are_refused_in_one_line(odd: Path, args: list[str], want: str) -> None:
    d = str(odd)
    result = runner.invoke(app, [a.format(d=d) for a in args])
    assert want.format(d=d) in one_error_line(result)


def test_a_broker_port_outside_the_tcp_range_is_a_usage_error() -> None:
    result = runner.invoke(app, ["broker", "--port", "70000"])
    assert result.exit_code == 2
    assert "Traceback" not in result.output
    assert "--port" in result.stderr


OVERFLOW = "kafka://127.0.0.1:99999"
"""A port above 65535: aiokafka raised OverflowError from inside its connect."""


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["register", str(FIXTURES.parent.parent / "examples" / "gb200-128.yaml")],
                     id="register"),
        pytest.param(["submit", "--job", "j1", "--nodes", "2", "--cluster", "c1"], id="submit"),
        pytest.param(["cancel", "--job", "j1", "--cluster", "c1"], id="cancel"),
        pytest.param(["cordon", "--node", "n1", "--cluster", "c1"], id="cordon"),
        pytest.param(["uncordon", "--node", "n1", "--cluster", "c1"], id="uncordon"),
        pytest.param(["health", "--node", "n1", "--state", "failed", "--cluster", "c1"],
                     id="health"),
        pytest.param(["repair", "--node", "n1", "--cluster", "c1"], id="repair"),
        pytest.param(["allow-interactive", "--cluster", "c1"], id="allow-interactive"),
        pytest.param(["rack-health", "--rack", "r1", "--state", "failed", "--cluster", "c1"],
                     id="rack-health"),
        pytest.param(["keys", "revoke", "k1", "--cluster", "c1"], id="keys revoke"),
        pytest.param(["status"], id="status"),
        pytest.param(["jobs", "--cluster", "c1"], id="jobs"),
        pytest.param(["job", "j1", "--cluster", "c1"], id="job"),
        pytest.param(["racks", "--cluster", "c1"], id="racks"),
        pytest.param(["rack", "r1", "--cluster", "c1"], id="rack"),
        pytest.param(["worker"], id="worker"),
        pytest.param(["recorder", "--db", "{d}/h.duckdb"], id="recorder"),
        pytest.param(["tui"], id="tui"),
        pytest.param(["up", "--headless"], id="up"),
        pytest.param(["kube", "--cluster", "c1"], id="kube"),
        pytest.param(["slurm", "--cluster", "c1"], id="slurm"),
        pytest.param(["exporter", "dcgm", "--file", str(FIXTURES / "dcgm" /
                      "dcgm_exporter_sample.prom"), "--node", "n1", "--cluster", "c1"],
                     id="exporter dcgm"),
    ],
)  # fmt: skip
def test_a_broker_port_outside_1_to_65535_is_refused_up_front_on_every_command(
    tmp_path: Path, command: list[str]
) -> None:
    args = [a.format(d=tmp_path) for a in command]
    line = one_error_line(runner.invoke(app, [*args, "--broker", OVERFLOW]))
    assert f"'{OVERFLOW}': port '99999' is not a TCP port (1-65535)" in line


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param(["history", "verify", "--db", "{d}/h.duckdb", "--against-log",
                      "kafka://:9092"], "'kafka://:9092': no host", id="verify --against-log"),
        pytest.param(["status", "--broker", "http://h:1"], "expected kafka://host:port",
                     id="another scheme"),
    ],
)  # fmt: skip
def test_a_bad_broker_address_is_named_in_one_line(
    tmp_path: Path, args: list[str], want: str
) -> None:
    result = runner.invoke(app, [a.format(d=tmp_path) for a in args])
    assert want in one_error_line(result)


def test_a_bad_broker_in_the_environment_names_the_variable() -> None:
    result = runner.invoke(app, ["status"], env={"RACKPLANE_BROKER": "kafka://h:0"})
    line = one_error_line(result)
    assert "port '0' is not a TCP port" in line
    assert "RACKPLANE_BROKER" in line


FRAGMENTATION = str(FIXTURES.parent.parent / "examples" / "fragmentation.yaml")


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param(["reliability", "--mtbi-days", "nan"],
                     "the node MTBI must be a positive number of days, got nan",
                     id="a NaN MTBI (printed nan figures, exit 0)"),
        pytest.param(["reliability", "--mtbi-days", "inf"], "got inf", id="an infinite MTBI"),
        pytest.param(["reliability", "--mtbi-days", "-3"], "got -3.0", id="a negative MTBI"),
        pytest.param(["reliability", "--mtbi-days", "1e-320"], "beyond what can be computed",
                     id="an MTBI so small the rates are infinite"),
        pytest.param(["capacity", "--racks", "4", "--mtbi-days", "inf", "--mttr-days", "1"],
                     "MTBI and MTTR must be numbers of days, got inf, 1.0",
                     id="an infinite capacity MTBI (gave P = 0)"),
        pytest.param(["capacity", "--racks", "4", "--mtbi-days", "1", "--mttr-days", "nan"],
                     "got 1.0, nan", id="a NaN MTTR"),
        pytest.param(["capacity", "--racks", "4", "--unavailability", "nan"],
                     "unavailability is a probability in [0, 1], got nan", id="a NaN P"),
        pytest.param(["capacity", "--racks", "4", "--sweep", "0:1:nan"],
                     "expected three finite numbers START:STOP:STEP, got '0:1:nan'",
                     id="a NaN sweep step (was ValueError)"),
        pytest.param(["simulate", FRAGMENTATION, "--days", "nan"],
                     "--days: days must be more than 0 and at most 36,525, got nan",
                     id="simulate --days nan (was ValueError)"),
        pytest.param(["simulate", FRAGMENTATION, "--days", "inf"], "at most 36,525, got inf",
                     id="simulate --days inf (was OverflowError)"),
        pytest.param(["simulate", FRAGMENTATION, "--days", "1e9"], "got 1000000000.0",
                     id="simulate --days beyond timedelta (was OverflowError)"),
        pytest.param(["simulate", FRAGMENTATION, "--policy", "magic"],
                     "unknown policy 'magic'; choose from naive, tas, tas+spares,",
                     id="an unknown policy is listed in words, not as a tuple"),
    ],
)  # fmt: skip
def test_planning_figures_that_are_no_numbers_are_refused_in_one_line(
    args: list[str], want: str
) -> None:
    assert want in one_error_line(runner.invoke(app, args))


@pytest.mark.parametrize(
    ("text", "want"),
    [
        pytest.param("days: .nan\n", "days: Input should be a finite number", id="NaN days"),
        pytest.param("days: .inf\n", "days: Input should be a finite number",
                     id="infinite days (was OverflowError)"),
        pytest.param("days: 1\nruntime: {warmup_days: 1e12}\n", "runtime.warmup_days: Input",
                     id="a warm-up beyond the calendar (was OverflowError)"),
        pytest.param("days: 1\nruntime: {sample_minutes: 1e-9}\n", "runtime.sample_minutes",
                     id="a sample every nanosecond (hung)"),
        pytest.param("days: 1\nstart: 9999-12-30T00:00:00Z\n",
                     "a 1-day run from 9999-12-30 would end after the year 9999",
                     id="a run that ends past the calendar (was OverflowError)"),
    ],
)  # fmt: skip
def test_a_scenario_that_cannot_be_simulated_is_refused_in_one_line(
    tmp_path: Path, text: str, want: str
) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text("cluster: {racks: 2}\n" + text)
    line = one_error_line(runner.invoke(app, ["simulate", str(path)]))
    assert line.startswith(f"error: {path}: ")
    assert want in line


@pytest.mark.parametrize(
    ("args", "want"),
    [
        pytest.param(["--duration", "nan"], "--duration: expected a positive number, got nan",
                     id="a NaN duration"),
        pytest.param(["--duration", "-1"], "--duration: expected a positive number, got -1.0",
                     id="a negative duration"),
        pytest.param(["--jobs-per-minute", "0"], "--jobs-per-minute: expected a positive",
                     id="no load (was ZeroDivisionError in the load generator)"),
        pytest.param(["--jobs-per-minute", "inf"], "got inf", id="an infinite load"),
    ],
)  # fmt: skip
def test_up_refuses_a_duration_or_load_that_is_no_positive_number(
    args: list[str], want: str
) -> None:
    result = runner.invoke(app, ["up", "--headless", *args, *NOWHERE[:2]])
    assert want in one_error_line(result)


@pytest.mark.parametrize(
    "command",
    [
        pytest.param(["status"], id="a read command"),
        pytest.param(["cordon", "--node", "n1", "--cluster", "c1", "--actor", "operator:a"],
                     id="a client command"),
        pytest.param(["up", "--headless"], id="up (was a KafkaConnectionError traceback)"),
    ],
)  # fmt: skip
def test_a_broker_nothing_listens_on_is_one_line_without_library_noise(
    command: list[str],
) -> None:
    """aiokafka's "Unable connect to ..." and asyncio's "Unclosed AIOKafkaConsumer" reached
    stderr through logging's last resort beside the command's own line (in a fresh process:
    under pytest the root logger has handlers, and the last resort never speaks)."""
    done = subprocess.run(
        [sys.executable, "-m", "rackplane", *command, *NOWHERE[:2]],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if command[0] == "up":
        assert lines.pop(0) == "broker kafka://127.0.0.1:9"  # its progress, then the error
    assert len(lines) == 1, done.stderr
    assert done.returncode == 2
    assert lines[0].startswith("error: cannot reach kafka://127.0.0.1:9")
    assert lines[0].count("KafkaConnectionError") == 1, lines[0]  # said once, not twice
