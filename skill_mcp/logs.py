"""Structured logging (SPEC §13): one JSON object per line on stderr; stdout is the protocol."""

from __future__ import annotations

import logging
import sys
from typing import Any

import structlog

_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging(level: str = "info", fmt: str = "json", stream: Any = None) -> None:
    stream = stream or sys.stderr
    renderer: Any
    if fmt == "console":
        renderer = structlog.dev.ConsoleRenderer(colors=stream.isatty())
    else:
        renderer = structlog.processors.JSONRenderer(ensure_ascii=False)
    structlog.configure(
        processors=[
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(_LEVELS.get(level, logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=stream),
        cache_logger_on_first_use=False,
    )
    # The SDK logs through the standard library; keep it on stderr and quiet.
    logging.basicConfig(stream=stream, level=logging.WARNING, force=True)


def get_logger() -> Any:
    return structlog.get_logger()
