"""The `model` conformance backend: the reference model itself behind the command port."""

from __future__ import annotations

from qlwf.impl.port import CommandPort


class ModelBackend:
    """The model behind the port (a self-check of the harness and of recorded traces)."""

    def open(self) -> CommandPort:
        from qlwf.conformance.lockstep.model_port import ModelPort

        return ModelPort()

    def shutdown(self) -> None:
        """Nothing to release: each ModelPort lives in memory and ends with its trace."""
