"""How payloads become bytes and back: bytes as they are (the default), or JSON."""

from __future__ import annotations

import json
from typing import Any, Protocol


class Serializer(Protocol):
    def dumps(self, value: Any) -> bytes: ...

    def loads(self, data: bytes) -> Any: ...


class Raw:
    """Payloads are ``bytes`` (a ``str`` is encoded as UTF-8); handlers receive ``bytes``."""

    def dumps(self, value: Any) -> bytes:
        if isinstance(value, bytes):
            return value
        if isinstance(value, str):
            return value.encode()
        raise TypeError("a payload is bytes or str; use Json() for other values")

    def loads(self, data: bytes) -> Any:
        return data


class Json:
    """Payloads are any JSON value; handlers receive the decoded value."""

    def dumps(self, value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()

    def loads(self, data: bytes) -> Any:
        return json.loads(data)
