"""koboi's loggers: the standard :mod:`logging` module, every record masked.

A failure that changes nothing the caller sees (an observer that raised, a
trust rule that could not be saved) must not vanish, and must not leak either:
it is logged through a logger from :func:`get_logger`, whose filter masks every
secret (the kernel's one definition, :mod:`koboi.secrets`) in the message, its
arguments and the traceback before any handler sees the record. Configure
handlers and levels as for any library (``logging.getLogger("koboi")``).
"""

from __future__ import annotations

import logging
import traceback

from koboi.secrets import mask_secrets


class RedactingFilter(logging.Filter):
    """Masks secrets in a record's message and traceback (it never drops a record)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a bad format string: keep the raw message, still masked
            message = str(record.msg)
        record.msg, record.args = mask_secrets(message), None
        if record.exc_info and not record.exc_text:
            text = "".join(traceback.format_exception(*record.exc_info))
            record.exc_text = mask_secrets(text.rstrip("\n"))
        elif record.exc_text:
            record.exc_text = mask_secrets(record.exc_text)
        return True


_FILTER = RedactingFilter()


def get_logger(name: str) -> logging.Logger:
    """``logging.getLogger(name)`` with the redacting filter attached (once)."""
    logger = logging.getLogger(name)
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger
