"""Typed errors of the model (commands.md §2.2–§2.3).

Every error carries its class (Invalid / Conflict / Unavailable), a code (the family code of
commands.md §2.3) and a reason (a lowercase word of the command's vocabulary). `message` is free
text for humans and is never compared by conformance.
"""

from __future__ import annotations

from typing import ClassVar


class QlwfError(Exception):
    """Base of all typed model errors."""

    error_class: ClassVar[str] = "Error"

    def __init__(self, code: str, reason: str, message: str = "") -> None:
        self.code = code
        self.reason = reason
        self.message = message or reason
        super().__init__(f"{self.error_class} {code} {reason}: {self.message}")

    def to_json(self) -> dict[str, str]:
        """The comparable identity of the error: class, code and reason."""
        return {"class": self.error_class, "code": self.code, "reason": self.reason}

    def with_message(self) -> dict[str, str]:
        return {**self.to_json(), "message": self.message}


class Invalid(QlwfError):
    error_class = "Invalid"


class Conflict(QlwfError):
    error_class = "Conflict"


class Unavailable(QlwfError):
    error_class = "Unavailable"


ERROR_CLASSES: dict[str, type[QlwfError]] = {
    "Invalid": Invalid,
    "Conflict": Conflict,
    "Unavailable": Unavailable,
}


def error_from_json(obj: dict[str, str]) -> QlwfError:
    """Rebuild a typed error from its JSON form (class, code, reason[, message])."""
    cls = ERROR_CLASSES[obj["class"]]
    return cls(obj["code"], obj["reason"], obj.get("message", ""))
