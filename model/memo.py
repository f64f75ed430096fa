"""The exact-input memo's former home: it lives behind the speed-up seam now (model/speedups.py, which
is not the spec). Its names stay importable from here for the modules that import them so."""

from __future__ import annotations

from .speedups import (
    COLD_STREAK,
    MAX_KEY_CHARS,
    SAMPLE_EVERY,
    ExactMemo,
    IdentityMemo,
    Normalizer,
    flat_key,
    is_plain_json,
    parsed_json_input,
    text_key,
    trusting_record_identity,
)

__all__ = [
    "COLD_STREAK",
    "MAX_KEY_CHARS",
    "SAMPLE_EVERY",
    "ExactMemo",
    "IdentityMemo",
    "Normalizer",
    "flat_key",
    "is_plain_json",
    "parsed_json_input",
    "text_key",
    "trusting_record_identity",
]
