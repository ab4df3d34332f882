"""The one retry policy for registry traffic: what is worth another attempt, how many
attempts in all, and how long to wait between them.

Every loop that retries a registry call (a request, a token fetch, a blob download, an
upload, a manifest PUT) goes through :func:`retry`, so the policy lives here alone:

- Retried: failures another attempt may cure, raised as :class:`Retryable`: a connection
  refused, reset or dropped (ECONNRESET, ``RemoteDisconnected``, ``IncompleteRead``, a
  body shorter than its Content-Length), a connect or read timeout, and HTTP 408, 429 and
  5xx but 501 and 505.
- Not retried: everything else (4xx answers, TLS certificates that do not verify, replies
  that break the protocol): another attempt would get the same answer.
- Waits: ``backoff`` seconds before the second attempt, doubled before each later one
  (with a tenth of jitter, so clients that failed together do not retry together), capped
  at ``max_backoff``; a server's Retry-After replaces the computed wait, within the cap.
"""

from __future__ import annotations

import email.utils
import http.client
import random
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from .errors import RegistryError

T = TypeVar("T")

TRANSIENT_STATUS = frozenset({408, 429, 500, 502, 503, 504})


class Retryable(RegistryError):
    """A failure another attempt may cure. ``after``: the server's Retry-After, in seconds;
    ``advice``: how to avoid it, appended to the message once the attempts are spent."""

    def __init__(self, message: str, *, after: float | None = None, advice: str = ""):
        super().__init__(message)
        self.after = after
        self.advice = advice


def is_transient(exc: BaseException) -> bool:
    """Whether a low-level exception from a connection is worth another attempt."""
    if isinstance(exc, ssl.SSLCertVerificationError | http.client.InvalidURL):
        return False
    return isinstance(exc, OSError | http.client.HTTPException)


def retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header: delta-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, OverflowError, IndexError):
        return None
    return max(0.0, when - (time.time() if now is None else now))


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 4  # in all, the first included
    backoff: float = 0.5  # seconds before the second attempt; doubled before each later one
    max_backoff: float = 30.0

    def delay(self, attempt: int, hint: float | None = None) -> float:
        """Seconds to wait after failed attempt number ``attempt`` (1-based)."""
        if hint is not None:
            return min(max(hint, 0.0), self.max_backoff)
        base = self.backoff * 2.0 ** (attempt - 1)
        return min(base + random.uniform(0, base / 10), self.max_backoff)


def retry(
    attempt: Callable[[int], T],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], None] = time.sleep,
    note: Callable[[str], None] | None = None,
) -> T:
    """``attempt(n)`` for n = 1, 2, ... until it returns. A :class:`Retryable` it raises is
    retried after the policy's wait (``note`` hears of each retry); once the attempts are
    spent it becomes a plain :class:`RegistryError` saying how many were made. Any other
    exception passes through at once."""
    attempts = max(1, policy.attempts)
    for n in range(1, attempts + 1):
        try:
            return attempt(n)
        except Retryable as exc:
            if n >= attempts:
                tried = f"{n} attempts" if n > 1 else "1 attempt"
                advice = f"; {exc.advice}" if exc.advice else ""
                raise RegistryError(f"{exc} (gave up after {tried}){advice}") from None
            wait = policy.delay(n, exc.after)
            if note is not None:
                note(f"{exc}; retrying in {wait:.1f}s (attempt {n + 1} of {attempts})")
            sleep(wait)
    raise AssertionError("unreachable")
