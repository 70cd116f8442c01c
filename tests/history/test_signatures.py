"""The history against a forger who can write the file: issue 16's case, where rewriting every
hash (and the stored head) made `history verify` pass with a changed actor, a deleted
`JobCancelled` and an inserted event. The chain still passes such a file; the controller's
signatures, checked against the worker's public key from outside the file, do not.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from rackplane.cli import app
from rackplane.history import DuckDBAuditSink, open_history
from rackplane.history._rows import GENESIS, chain
from rackplane.history.continuity import check_seqs
from rackplane.history.signatures import check_signatures
from rackplane.history.verify import verify
from rackplane.keyfiles import KeyFile
from rackplane.logtrust import LogTrust
from tests.history.conftest import Recorded

WORKER = KeyFile.new("worker:w1")
TRUST = LogTrust.of([WORKER.public_key])
runner = CliRunner()
MALLORY = (
    'UPDATE events SET payload = replace(payload, \'"actor":"policy:tas"\', '
    "'\"actor\":\"operator:mallory\"'), actor = 'operator:mallory' WHERE seq = 30"
)
"""The forger's edit: the event at seq 30 (a placement by the scheduler) made mallory's."""


@pytest.fixture(scope="module")
def signed_history(recorded: Recorded, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The simulated run's events as a signing controller writes them, recorded."""
    path = tmp_path_factory.mktemp("signed") / "signed.duckdb"
    with DuckDBAuditSink(path) as sink:
        sink.record_events([WORKER.sign_event(e) for e in recorded.events])
    return path


@pytest.fixture
def copy(signed_history: Path, tmp_path: Path) -> Path:
    path = tmp_path / "forged.duckdb"
    shutil.copy(signed_history, path)
    return path


def rechain(path: Path, *statements: str) -> None:
    """Run the forger's `statements`, then recompute every hash of the events table and its
    stored head, as someone who can write the file can."""
    con = duckdb.connect(str(path))
    for statement in statements:
        con.execute(statement)
    rows = con.execute("SELECT row_id, payload FROM events ORDER BY row_id").fetchall()
    prev = GENESIS
    for row_id, payload in rows:
        digest = chain(prev, payload)
        con.execute("UPDATE events SET prev_hash = ?, hash = ? WHERE row_id = ?",
                    [prev, digest, row_id])  # fmt: skip
        prev = digest
    con.execute("UPDATE chain_heads SET row_id = ?, hash = ? WHERE tbl = 'events'",
                [rows[-1][0], prev])  # fmt: skip
    con.close()


def verdicts(path: Path) -> tuple[bool, bool, list[str]]:
    """(the chains hold, the seqs are 1..N, the signature problems)."""
    with open_history(path) as reader:
        chains = all(r.ok for r in verify(reader))
        seqs = all(r.ok for r in check_seqs(reader))
        signatures = check_signatures(reader, TRUST)
    return chains, seqs, signatures.examples


def test_an_untouched_signed_history_verifies(signed_history: Path, recorded: Recorded) -> None:
    with open_history(signed_history) as reader:
        report = check_signatures(reader, TRUST)
    assert report.ok and report.signed == report.events == len(recorded.events)


def test_a_changed_actor_with_every_hash_recomputed_fails_its_signature(copy: Path) -> None:
    rechain(copy, MALLORY)
    chains, seqs, problems = verdicts(copy)
    assert chains and seqs  # what fooled verify before
    assert len(problems) == 1 and "seq 30: its signature by key" in problems[0]


def test_a_deleted_event_with_the_later_ones_renumbered_fails_their_signatures(
    copy: Path,
) -> None:
    con = duckdb.connect(str(copy))
    (gone,) = con.execute("SELECT min(seq) FROM events WHERE type = 'JobPlaced'").fetchone()  # type: ignore[misc]
    (last,) = con.execute("SELECT max(seq) FROM events").fetchone()  # type: ignore[misc]
    con.close()
    rechain(copy, f"DELETE FROM events WHERE seq = {gone}")
    assert verdicts(copy)[:2] == (True, False)  # the seq it leaves missing
    renumber = [
        f"UPDATE events SET seq = seq - 1, payload = replace(payload, '\"seq\":{s},', "
        f"'\"seq\":{s - 1},') WHERE seq = {s}"
        for s in range(gone + 1, last + 1)
    ]
    rechain(copy, *renumber)
    chains, seqs, problems = verdicts(copy)
    assert chains and seqs
    assert problems and f"seq {gone}: its signature" in problems[0]


def test_an_inserted_event_with_every_hash_recomputed_is_not_signed(copy: Path) -> None:
    con = duckdb.connect(str(copy))
    (last,) = con.execute("SELECT max(seq) FROM events").fetchone()  # type: ignore[misc]
    (payload,) = con.execute(f"SELECT payload FROM events WHERE seq = {last}").fetchone()  # type: ignore[misc]
    con.close()
    doc = json.loads(payload)
    doc |= {"seq": last + 1, "id": "forged", "signature": None}
    text = json.dumps(doc, separators=(",", ":")).replace("'", "''")
    rechain(copy, "INSERT INTO events SELECT row_id + 1, cluster, seq + 1, type, \"at\", job, "
                  f"node, rack, actor, causation_id, correlation_id, '{text}', hash, hash "
                  f"FROM events WHERE seq = {last}")  # fmt: skip
    chains, seqs, problems = verdicts(copy)
    assert chains and seqs
    assert problems == [f"cluster {doc['cluster']}: seq {last + 1}: not signed"]


def test_history_verify_checks_signatures_with_a_log_key_and_says_when_it_cannot(
    copy: Path, signed_history: Path, tmp_path: Path
) -> None:
    public = tmp_path / "worker.pub.json"
    public.write_text(json.dumps({"id": WORKER.id, "actor": WORKER.actor,
                                  "public_key": WORKER.public_key}))  # fmt: skip
    ok = runner.invoke(app, ["history", "verify", "--db", str(signed_history), "--log-key",
                             str(public)])  # fmt: skip
    assert ok.exit_code == 0, ok.output
    assert "signatures:" in ok.output and "events signed by a trusted log key" in ok.output
    rechain(copy, MALLORY)
    bad = runner.invoke(app, ["history", "verify", "--db", str(copy), "--log-key",
                              WORKER.public_key, "--json"])  # fmt: skip
    assert bad.exit_code == 1, bad.output
    out = json.loads(bad.stdout)
    assert all(t["ok"] for t in out["tables"]) and out["signatures"]["refused"] == 1
    unchecked = runner.invoke(app, ["history", "verify", "--db", str(copy)])
    assert unchecked.exit_code == 0  # without a key only the chains speak, and they hold
    assert "signatures: not checked" in unchecked.output
    wrong = runner.invoke(app, ["history", "verify", "--db", str(copy), "--log-key", "nope"])
    assert wrong.exit_code == 2 and wrong.output.count("\n") == 1
