"""Every environment variable cugemm8 reads, in one place, and the one rule for flags: unset, "", "0",
"false", "no" and "off" (any case) mean off; anything else means on."""
from __future__ import annotations

import os

CACHE_DIR = "CUGEMM8_CACHE_DIR"                        # the disk cache of compiled kernels (a path)
JIT_DISABLE_CACHE = "CUGEMM8_JIT_DISABLE_CACHE"        # flag: compile again instead of reading the disk cache
PRINT_CONFIGS = "CUGEMM8_PRINT_CONFIGS"                # flag: print each new configuration to stderr
DISABLE_FFMA_INTERLEAVE = "CUGEMM8_DISABLE_FFMA_INTERLEAVE"  # flag, or unset for the default (ffma.py)
PRINT_FFMA_PATCH = "CUGEMM8_PRINT_FFMA_PATCH"          # flag: print what the FFMA patch changed

VARIABLES = {
    CACHE_DIR: "where compiled kernels are cached (default $XDG_CACHE_HOME/cugemm8 or ~/.cache/cugemm8)",
    JIT_DISABLE_CACHE: "flag: ignore (and overwrite) kernels cached on disk",
    PRINT_CONFIGS: "flag: print each configuration the first time a call uses it, to stderr",
    DISABLE_FFMA_INTERLEAVE: "flag: on keeps the FFMA patch off, off turns it on; unset: the default (off)",
    PRINT_FFMA_PATCH: "flag: print what the FFMA patch changed, once per kernel and process",
}

_OFF = ("", "0", "false", "no", "off")


def flag(name: str) -> bool:
    """Whether the flag `name` is on."""
    return os.environ.get(name, "").strip().lower() not in _OFF


def is_set(name: str) -> bool:
    """Whether `name` holds a value (for the flags whose unset state means a default)."""
    return os.environ.get(name, "").strip() != ""


def path(name: str) -> str | None:
    """A path variable's value, or None if unset or empty."""
    value = os.environ.get(name, "").strip()
    return value or None
