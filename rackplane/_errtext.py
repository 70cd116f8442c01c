"""An exception as one line of text, its type named once."""

from __future__ import annotations


def named(err: BaseException) -> str:
    """`Type: message`; aiokafka's errors already start their message with their type
    (`KafkaConnectionError: Unable to bootstrap ...`), and it is not said twice."""
    name, text = type(err).__name__, str(err)
    if not text:
        return name
    return text if text.startswith(name) else f"{name}: {text}"
