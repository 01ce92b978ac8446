"""A bounded reachability probe, so a hub model fails in seconds when there is no network.

``huggingface_hub`` retries a failed connection for half a minute, logging each attempt; a
name lookup alone can take six seconds to fail here. Before any download we try one TCP
connection to the hub (or to the HTTPS proxy, when one is configured) on a daemon thread and
wait at most :data:`PROBE_SECONDS` (1.5 s), name lookup included: long enough for a slow
link, short enough that a whole command fails in about 3 s. A failed probe becomes one clear
error line; a successful one lets the download go ahead as usual.
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlsplit

PROBE_SECONDS = 1.5


def probe_target(endpoint: str) -> tuple[str, int]:
    """(host, port) a connection to ``endpoint`` goes to first: the proxy if one is set."""
    proxy = os.environ.get("HTTPS_PROXY") or os.environ.get("https_proxy")
    url = urlsplit(proxy if proxy and endpoint.startswith("https") else endpoint)
    default_port = 443 if url.scheme == "https" else 80
    return url.hostname or "", url.port or default_port


def reachable(host: str, port: int, timeout: float = PROBE_SECONDS) -> bool:
    """Whether a TCP connection to ``host:port`` opens within ``timeout`` seconds."""
    if not host:
        return False
    outcome: list[bool] = []

    def connect() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome.append(True)
        except OSError:
            outcome.append(False)

    worker = threading.Thread(target=connect, name="picocontext-probe", daemon=True)
    worker.start()
    worker.join(timeout)
    return bool(outcome and outcome[0])


def hub_unreachable_reason(timeout: float = PROBE_SECONDS) -> str | None:
    """``None`` when the Hugging Face endpoint answers, else why not (one short phrase)."""
    from huggingface_hub import constants

    host, port = probe_target(str(constants.ENDPOINT))
    if reachable(host, port, timeout):
        return None
    return f"{host} cannot be reached (no connection to port {port} within {timeout:g} s)"
