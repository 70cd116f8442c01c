"""What drivers and scrapes say, made valid for a sample before it is built.

The exporter is where outside text enters telemetry, so it copes with odd characters and
the GPU Manager never sees an invalid sample because of a GPU's name:
- a GPU's model is free text: refused characters are escaped and it is cut to `LABEL_MAX`
  (`printable`), so a strange name still arrives, visibly strange;
- a UUID or a PCI bus id is an id: anything else is dropped (None: not read).
"""

from __future__ import annotations

from rackplane.models import ID_RULE, LABEL_MAX, printable


def text_of(value: object) -> str | None:
    """A driver's value as text (bytes decoded, undecodable bytes replaced); None stays None."""
    if value is None:
        return None
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def label(value: object) -> str | None:
    """A GPU's model (or other free text from a driver), valid as a `Label`."""
    text = text_of(value)
    return None if text is None else printable(text, LABEL_MAX)


def device_id(value: object) -> str | None:
    """A UUID or PCI bus id if it is a valid id, else None."""
    text = text_of(value)
    return text if text is not None and ID_RULE.culprit(text) is None else None
