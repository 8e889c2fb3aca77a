"""Where a sweep's tasks run: a Dask LocalCluster on loopback over TLS, or the user's scheduler.

Dask has no authentication of its own, and client, scheduler and workers send each other pickles: a
peer that can reach a scheduler can run code on its workers and in every client that reads results.
So the LocalCluster listens on 127.0.0.1 only (scheduler, nannies, workers, dashboard) and speaks TLS
with certificates made for the run (``Security.temporary``): another user of the machine can neither
reach it from outside nor submit tasks to it from inside. A user's scheduler is ``tls://`` with a
CA, a certificate and a key (Dask's TLS is mutual; ``Security`` checks no host name: a cluster has its
own CA), or ``tcp://``, which the command warns about (TCP_WARNING).
"""

from __future__ import annotations

import os
import re
from typing import Any

from leveller.errors import UserError

SCHEDULER_RE = re.compile(r"^(tcp|tls)://[^\s/]+(:\d+)?$")
TCP_WARNING = ("Dask's tcp:// has no authentication and client, scheduler and workers send each other "
               "pickles: whoever can reach the scheduler can run code on its workers and in this process. "
               "Use tls:// with --tls-ca/--tls-cert/--tls-key, or a network only you can reach")


def client_security(ca: str, cert: str, key: str) -> Any:
    """distributed's Security of a client of a tls:// scheduler, its files loaded now; UserError naming the
    options when they are no CA certificate, certificate and matching key (PEM)."""
    import ssl

    from distributed.security import Security

    security = Security(tls_ca_file=ca, tls_client_cert=cert, tls_client_key=key, require_encryption=True)
    try:
        security.get_connection_args("client")  # loads the CA, the certificate and the key
    except (ssl.SSLError, OSError, ValueError) as exc:
        raise UserError(f"--tls-ca/--tls-cert/--tls-key: cannot load them ({exc}); expected PEM files: the CA's "
                        "certificate, this client's certificate and its private key") from None
    return security


class dask_client:
    """A distributed Client on the user's scheduler, or on a LocalCluster (loopback, TLS) it starts and
    stops."""

    def __init__(self, scheduler: str | None, workers: int | None, security: Any = None) -> None:
        self.scheduler = scheduler
        self.workers = workers or os.cpu_count() or 1
        self.security = security
        self.cluster: Any = None
        self.client: Any = None

    def __enter__(self) -> Any:
        from distributed import Client, LocalCluster
        from distributed.security import Security

        if self.scheduler is not None:
            try:
                self.client = Client(self.scheduler, timeout=30, security=self.security)
            except OSError as exc:  # also a TLS handshake refused: FatalCommClosedError is an OSError
                raise UserError(f"--scheduler {self.scheduler}: cannot connect ({exc})") from None
            return self.client
        self.cluster = LocalCluster(n_workers=self.workers, threads_per_worker=1, processes=True,
                                    host="127.0.0.1", dashboard_address="127.0.0.1:0",
                                    security=Security.temporary(), protocol="tls://")
        self.client = Client(self.cluster)
        return self.client

    def __exit__(self, *exc: Any) -> None:
        if self.client is not None:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()
