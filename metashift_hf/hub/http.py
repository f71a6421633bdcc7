"""Every HTTP request huggingface_hub (and datasets through it) sends gets a bounded wait.

huggingface_hub's clients are made with ``timeout=None`` and some of its calls pass ``timeout=None``
per request (``list_repo_tree``'s pagination), so neither a client timeout nor a session setting bounds
them: a Hub endpoint that accepts and never answers hung ``tasks show`` (review case A1-78). The
transport below fills every unset timeout of a request; huggingface_hub's own retries (5, with backoff)
keep the total bounded. The bounds are huggingface_hub's documented variables: HF_HUB_ETAG_TIMEOUT to
connect, HF_HUB_DOWNLOAD_TIMEOUT per read (10 s each unless set).
"""

from __future__ import annotations

import httpx2
import huggingface_hub
from huggingface_hub import constants


class BoundedTransport(httpx2.HTTPTransport):
    """An HTTP transport that gives each request's unset timeouts the Hub's documented bounds."""

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        read, connect = float(constants.HF_HUB_DOWNLOAD_TIMEOUT), float(constants.HF_HUB_ETAG_TIMEOUT)
        bounds = {"connect": connect, "read": read, "write": read, "pool": connect}
        given = request.extensions.get("timeout") or {}
        request.extensions["timeout"] = {k: given.get(k) if given.get(k) is not None else v for k, v in bounds.items()}
        return super().handle_request(request)


def bound_hub_timeouts() -> None:
    """Make huggingface_hub create its shared client over :class:`BoundedTransport` (once per process;
    huggingface_hub recreates the client after a failed attempt, so the factory, not one client, is set)."""
    current = huggingface_hub.get_session()
    if isinstance(getattr(current, "_transport", None), BoundedTransport):
        return
    hooks, redirects = current.event_hooks, current.follow_redirects

    def bounded_client() -> httpx2.Client:
        return httpx2.Client(event_hooks=hooks, follow_redirects=redirects, timeout=None, transport=BoundedTransport())

    huggingface_hub.set_client_factory(bounded_client)
