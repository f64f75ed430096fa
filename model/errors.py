"""Typed errors of the model (commands.md §2.2–§2.3).

Every error carries its class (Invalid / Conflict / Unavailable), a code (the family code of
commands.md §2.3) and a reason (a lowercase word of the command's vocabulary). `message` is free
text for humans and is never compared by conformance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, NoReturn

from . import tables as T


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


class InvalidRaiser:
    """Raises Invalid with one fixed code and reason: a normalizer's error, one short line per check."""

    def __init__(self, code: str, reason: str) -> None:
        self.code = code
        self.reason = reason

    def __call__(self, message: str) -> NoReturn:
        raise Invalid(self.code, self.reason, message)

    def check(self, ok: bool, message: str) -> None:
        if not ok:
            self(message)


@dataclass(frozen=True)
class CommandErrors:
    """The typed errors of one command (commands.md §2.2–§2.3): the code comes from the command's
    family (tables.FAMILIES), the reason from the command's vocabulary (commands.md §4). The model
    and every storage implementation build their errors here, so a code cannot differ between them."""

    command: str

    @property
    def family(self) -> T.Family:
        return T.FAMILIES[T.COMMAND_FAMILY[self.command]]

    def invalid(self, reason: str, message: str = "") -> Invalid:
        return Invalid(self.family.invalid or "", reason, message)

    def conflict(self, reason: str, message: str = "") -> Conflict:
        return Conflict(self.family.conflict or "", reason, message)

    def unavailable(self, reason: str, message: str = "") -> Unavailable:
        return Unavailable(self.family.unavailable or "", reason, message)

    def require(self, ok: bool, message: str) -> None:
        """Argument check: Invalid `argument_invalid` unless `ok`."""
        if not ok:
            raise self.invalid("argument_invalid", message)

    def argument_raiser(self) -> InvalidRaiser:
        """The Invalid of a malformed argument object (`page_invalid` for the paged command)."""
        return InvalidRaiser(self.family.invalid or "", "page_invalid" if self.command.endswith("_page")
                             else "argument_invalid")


class EvidenceProblem(ValueError):
    """Why a piece of ql3 admission evidence (task-attempts.md §3A) does not normalize.

    Internal to the evidence normalizers: the §3A ladder turns it into the Invalid of its check,
    whose message is ql3's reason text; the detail stays on the Invalid as its `__cause__`."""


def evidence_check(ok: bool, detail: str) -> None:
    if not ok:
        raise EvidenceProblem(detail)
