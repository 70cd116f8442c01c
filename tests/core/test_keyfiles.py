"""Key files: written 0600 and never overwritten, refused when others can read them, a pair
that matches, and signatures that are the same bytes each time (two workers proposing the
same command send the same record)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rackplane.keyfiles import KeyFile, KeyFileError, load_key
from rackplane.models import CordonNode, Role


def test_a_key_file_is_written_for_its_owner_only_and_read_back(tmp_path: Path) -> None:
    key = KeyFile.new("operator:alice")
    path = tmp_path / "alice.key"
    key.save(path)
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_key(path) == key
    with pytest.raises(KeyFileError, match="exists; a key file is never overwritten"):
        KeyFile.new("operator:alice").save(path)
    assert load_key(path) == key


MODES = [(0o600, True), (0o400, True), (0o640, True), (0o644, False), (0o660, False),
         (0o604, False)]  # fmt: skip


@pytest.mark.parametrize(("mode", "ok"), MODES)
def test_a_key_file_others_can_read_or_change_is_refused(
    tmp_path: Path, mode: int, ok: bool
) -> None:
    path = tmp_path / "k.key"
    KeyFile.new("user:bob").save(path)
    path.chmod(mode)
    if ok:
        assert load_key(path).actor == "user:bob"
    else:
        with pytest.raises(KeyFileError, match=f"mode {mode:o}"):
            load_key(path)


def test_a_key_file_whose_private_key_is_not_its_id_is_refused(tmp_path: Path) -> None:
    a, b = KeyFile.new("user:a"), KeyFile.new("user:b")
    path = tmp_path / "mixed.key"
    mixed = json.loads(a.model_dump_json()) | {"private_key": b.private_key.get_secret_value()}
    path.write_text(json.dumps(mixed))
    path.chmod(0o600)
    with pytest.raises(KeyFileError, match="its private key does not match its id"):
        load_key(path)
    (tmp_path / "junk.key").write_text("{}")
    (tmp_path / "junk.key").chmod(0o600)
    with pytest.raises(KeyFileError, match="not a rackplane key file"):
        load_key(tmp_path / "junk.key")


def test_the_private_key_shows_nowhere_but_in_the_file(tmp_path: Path) -> None:
    key = KeyFile.new("operator:alice")
    secret = key.private_key.get_secret_value()
    assert secret not in repr(key) and secret not in str(key)
    assert secret not in key.model_dump_json()
    assert secret not in key.trusted(Role.ADMIN).model_dump_json()
    key.save(tmp_path / "a.key")
    assert secret in (tmp_path / "a.key").read_text()


def test_signing_is_deterministic_and_leaves_the_command_as_it_was() -> None:
    key = KeyFile.new("operator:alice")
    c = CordonNode(id="x", cluster="c1", actor="operator:alice", node="r1-n1", reason="fan")
    one, two = key.sign(c), key.sign(c)
    assert one == two and one.signature is not None and one.signature.key == key.id
    assert one.model_copy(update={"signature": None}) == c
