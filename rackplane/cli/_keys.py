"""`rackplane keys`: make a key, show its public part, trust or revoke a key in a cluster.

A key file holds an actor's private key (mode 0600, never printed). `keys show --json` prints
the public part, which is what an admin trusts (`keys trust`) or what goes into a cluster
file's `policy.keys` for the first registration. Trusting and revoking are admin commands,
signed with the admin's key file (the `key_file` setting, RACKPLANE_KEY_FILE).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import BaseModel, ConfigDict, ValidationError
from rich.table import Table

from rackplane.cli._client import Broker, Cluster, Json, Prefix, Timeout, _issue
from rackplane.cli._config import ConfigFile
from rackplane.cli._render import console, fail, message_of, print_json
from rackplane.keyfiles import KeyFile, KeyFileError, load_key
from rackplane.models import Actor, KeyId, RevokeKey, Role, TrustedKey, TrustKey

keys_app = typer.Typer(help="Signing keys: make, show, trust, revoke.", no_args_is_help=True)


class PublicKey(BaseModel):
    """The public part of a key file (`keys show --json`)."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    actor: Actor
    id: KeyId
    public_key: str


@keys_app.command()
def new(
    actor: Annotated[str, typer.Option(help="Who signs with it: operator:alice, worker:w1.")],
    out: Annotated[Path, typer.Option(help="Where to write the key file (mode 0600).")],
) -> None:
    """Make a key pair for an actor and write it to a new key file."""
    try:
        key = KeyFile.new(actor)
    except ValidationError as err:
        fail(message_of(err))
    try:
        key.save(out)
    except KeyFileError as err:
        fail(str(err))
    console.print(f"wrote {out}: key [bold]{key.id}[/] of {key.actor} (mode 0600)")


@keys_app.command()
def show(
    key_file: Annotated[Path, typer.Argument(help="A key file.")],
    role: Annotated[
        list[Role] | None,
        typer.Option(help="Roles to print it with, as a cluster file's policy.keys entry."),
    ] = None,
    json_out: Json = False,
) -> None:
    """Print a key file's public part (never its private key)."""
    try:
        key = load_key(key_file)
    except KeyFileError as err:
        fail(str(err))
    if json_out:
        if role:
            print_json(key.trusted(*role).model_dump(mode="json"))
        else:
            print_json(PublicKey.model_validate(key.model_dump()).model_dump(mode="json"))
        return
    t = Table(title=f"key file {key_file}", title_justify="left", header_style="bold")
    t.add_column("key")
    t.add_column("actor")
    t.add_column("public key", overflow="fold")  # copied whole, never cut
    t.add_row(key.id, key.actor, key.public_key)
    console.print(t)


def _public(path: Path) -> PublicKey:
    try:
        return PublicKey.model_validate_json(path.read_text())
    except OSError as err:
        fail(f"{path}: cannot read: {err.strerror}")
    except UnicodeDecodeError as err:
        fail(f"{path}: not a public key: expected UTF-8 text (byte {err.start} cannot be decoded)")
    except ValidationError as err:
        fail(f"{path}: not a public key (`rackplane keys show --json`): {message_of(err)}")


@keys_app.command()
def trust(
    public: Annotated[Path, typer.Argument(help="The key's public part (`keys show --json`).")],
    cluster: Cluster,
    role: Annotated[list[Role], typer.Option(help="A role it gets (repeat for more).")],
    reason: Annotated[str, typer.Option(help="Why.")] = "",
    broker: Broker = None,
    prefix: Prefix = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Trust a key for its actor and roles in a cluster (admin; signed with your key file)."""
    p = _public(public)
    try:
        key = TrustedKey(id=p.id, public_key=p.public_key, actor=p.actor, roles=tuple(role))
    except ValidationError as err:
        fail(f"{public}: {message_of(err)}")
    where: dict[str, Any] = {"broker": broker, "prefix": prefix, "timeout": timeout}
    where["json_out"] = json_out
    _issue(TrustKey, cluster, config_file=config_file, actor=None, key=key, reason=reason, **where)


@keys_app.command()
def revoke(
    key: Annotated[str, typer.Argument(help="The id of the key to revoke.")],
    cluster: Cluster,
    reason: Annotated[str, typer.Option(help="Why.")] = "",
    broker: Broker = None,
    prefix: Prefix = None,
    timeout: Timeout = 30.0,
    json_out: Json = False,
    config_file: ConfigFile = None,
) -> None:
    """Stop trusting a key in a cluster, for good (admin; signed with your key file)."""
    where: dict[str, Any] = {"broker": broker, "prefix": prefix, "timeout": timeout}
    where["json_out"] = json_out
    _issue(RevokeKey, cluster, config_file=config_file, actor=None, key=key, reason=reason, **where)
