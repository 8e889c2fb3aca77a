"""Make a lab certificate authority and the certificates for mutual TLS.

`leveller certs init DIR --hosts h1,h2` writes into DIR:
  ca.pem, ca.key                  the CA (reused if DIR already has one: add hosts later; refused if
                                  only one of them is there, or ca.key is not 0600)
  controller.pem, controller.key  server certificate for the names/addresses agents dial (--controller-names)
  admin.pem, admin.key            client certificate for `leveller status`
  HOST.pem, HOST.key              one client certificate per host, named HOST (SAN and CN): the
                                  controller accepts reports for HOST only over that certificate
Keys are written 0600. A pair that exists is kept (the controller's is issued again when
--controller-names change); names are checked before anything is written. Copy ca.pem and a
host's pair to that host only.

examples:
  leveller certs init /etc/leveller/tls --hosts h1,h2,h3
  leveller certs init ./lab-tls --hosts h1 --controller-names ctl.lab,10.0.0.254
  leveller controller --tls-cert lab-tls/controller.pem --tls-key lab-tls/controller.key --tls-ca lab-tls/ca.pem
  leveller agent --host h1 --tls-cert lab-tls/h1.pem --tls-key lab-tls/h1.key --tls-ca lab-tls/ca.pem --log ...
"""

from __future__ import annotations

import argparse
from pathlib import Path


def _names(text: str) -> tuple[str, ...]:
    return tuple(n.strip() for n in text.split(",") if n.strip())


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="certs_command", metavar="ACTION", required=True)
    p = sub.add_parser("init", help="make a lab CA and certificates for the controller, admin and hosts",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", metavar="DIR", help="directory to write to (created; an existing CA in it is reused)")
    p.add_argument("--hosts", type=_names, default=(), metavar="H1,H2,...",
                   help="host names the agents report as (one client certificate each), e.g. --hosts h1,h2")
    p.add_argument("--controller-names", type=_names, default=None, metavar="NAME,ADDR,...",
                   help="DNS names and IP addresses the agents dial the controller by (default "
                   "localhost,127.0.0.1,::1), e.g. --controller-names ctl.lab,10.0.0.254")
    p.add_argument("--json", action="store_true", help="print the written files as JSON")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import json

    from leveller.rpc.certs import DEFAULT_CONTROLLER_NAMES, init

    issued = init(Path(args.dir), tuple(args.hosts), tuple(args.controller_names or DEFAULT_CONTROLLER_NAMES))
    if args.json:
        print(json.dumps({i.name: {"cert": str(i.cert), "key": str(i.key), "kept": i.kept} for i in issued}))
    else:
        for i in issued:
            print(f"{i.name:12s} {i.cert}  {i.key} (0600)" + (" kept" if i.kept else ""))
    return 0
