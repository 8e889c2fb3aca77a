"""Where a sweep's tasks run (leveller/sim/dask_cluster.py): a LocalCluster on loopback over TLS, a user's
tls:// scheduler with the --tls-* files, and tcp:// warned about (issue 41, finding 7). Real Dask
clusters on 127.0.0.1, certificates from `leveller certs init` and made here with `cryptography`."""

import json

import pytest

TOPOLOGY = "fabric:gpus=32,gpus_per_host=4,hosts_per_leaf=2,spines=2"
TRACE = "synthetic:jobs=4,min_s=5,max_s=10,max_hosts=4"


def grid(**over) -> dict:
    return {"topology": [TOPOLOGY], "trace": [TRACE], "policy": ["fair"], "levels": [2], "seed": [1],
            "duration": 30, **over}



def listening(pids: set[int]) -> set[tuple[str, int]]:
    import psutil

    found = set()
    for pid in pids:
        try:
            conns = psutil.Process(pid).net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        found |= {(c.laddr.ip, c.laddr.port) for c in conns if c.status == psutil.CONN_LISTEN}
    return found


def test_the_local_cluster_listens_on_loopback_only_and_speaks_tls(tmp_path) -> None:
    distributed = pytest.importorskip("distributed")
    import psutil

    from leveller.sim.dask_cluster import dask_client

    me = psutil.Process()
    before = listening({me.pid})
    with dask_client(None, 1) as client:
        pids = {me.pid, *(p.pid for p in me.children(recursive=True))}
        sockets = listening(pids) - before
        # scheduler, dashboard, nanny and worker: four listeners, none on another interface
        assert len(sockets) >= 4 and {ip for ip, _ in sockets} == {"127.0.0.1"}, sockets
        address = client.scheduler.address
        assert address.startswith("tls://127.0.0.1:")
        # another user of the machine, without the run's certificates, cannot submit tasks to it
        with pytest.raises((TypeError, OSError)):
            distributed.Client(address.replace("tls://", "tcp://"), timeout=3)
        with pytest.raises(OSError):
            distributed.Client(address, security=distributed.security.Security.temporary(), timeout=3)


def node_certificate(ca_dir, name: str = "dask-node"):
    """A certificate for a Dask scheduler or worker (they listen and dial: both key usages), signed by the
    CA of `leveller certs init` in ``ca_dir``."""
    import datetime as dt

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca = x509.load_pem_x509_certificate((ca_dir / "ca.pem").read_bytes())
    ca_key = serialization.load_pem_private_key((ca_dir / "ca.key").read_bytes(), None)
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
            .issuer_name(ca.subject).public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=1))
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]),
                           critical=False)
            .sign(ca_key, hashes.SHA256()))
    (ca_dir / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (ca_dir / f"{name}.key").write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                                           serialization.PrivateFormat.PKCS8,
                                                           serialization.NoEncryption()))
    (ca_dir / f"{name}.key").chmod(0o600)
    return str(ca_dir / f"{name}.pem"), str(ca_dir / f"{name}.key")


def test_a_sweep_on_a_tls_scheduler(tmp_path, capsys) -> None:
    distributed = pytest.importorskip("distributed")
    from leveller.cli import main

    tls, other = tmp_path / "tls", tmp_path / "other"
    assert main(["certs", "init", str(tls)]) == 0 and main(["certs", "init", str(other)]) == 0
    node, node_key = node_certificate(tls)
    security = distributed.security.Security(
        tls_ca_file=str(tls / "ca.pem"), tls_scheduler_cert=node, tls_scheduler_key=node_key,
        tls_worker_cert=node, tls_worker_key=node_key, tls_client_cert=node, tls_client_key=node_key,
        require_encryption=True)
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(grid(policy=["fair", "leveller"])))
    capsys.readouterr()
    sweep = ["simulate", "sweep", "--grid", str(path), "--json", "--scheduler"]
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, host="127.0.0.1",
                                  protocol="tls://", security=security, dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tls://127.0.0.1:")
        # the client's pair is admin.pem of `leveller certs init`, the CA the one that signed the scheduler's
        client = ["--tls-ca", str(tls / "ca.pem"), "--tls-cert", str(tls / "admin.pem"), "--tls-key",
                  str(tls / "admin.key")]
        assert main([*sweep, address, "--out", str(tmp_path / "o1"), *client]) == 0
        captured = capsys.readouterr()
        assert json.loads(captured.out)["points"] == 2 and "warning" not in captured.err
        rows = json.loads((tmp_path / "o1" / "results.json").read_text())
        assert [r["policy"] for r in rows] == ["fair", "leveller"] and all(0 < r["min"] <= 1 for r in rows)
        # without the files: a clear error, not distributed's TypeError traceback
        assert main([*sweep, address, "--out", str(tmp_path / "o2")]) == 2
        assert "Dask's TLS is mutual" in capsys.readouterr().err
        # a certificate of another CA: the scheduler refuses it, one line
        foreign = ["--tls-ca", str(other / "ca.pem"), "--tls-cert", str(other / "admin.pem"), "--tls-key",
                   str(other / "admin.key")]
        assert main([*sweep, address, "--out", str(tmp_path / "o3"), *foreign]) == 2
        assert f"--scheduler {address}: cannot connect" in capsys.readouterr().err
        assert main([*sweep, address, "--out", str(tmp_path / "o4"), *client[:4], "--tls-key",
                     str(tls / "ca.pem")]) == 2
        assert "cannot load them" in capsys.readouterr().err
        assert not (tmp_path / "o2").exists() and not (tmp_path / "o3").exists()


def test_tcp_is_warned_about_in_help_and_at_run_time(tmp_path, capsys) -> None:
    distributed = pytest.importorskip("distributed")
    from leveller.cli import main

    with pytest.raises(SystemExit):
        main(["simulate", "sweep", "--help"])
    assert "no authentication" in " ".join(capsys.readouterr().out.split())
    path = tmp_path / "grid.json"
    path.write_text(json.dumps(grid(policy=["fair"])))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False, host="127.0.0.1",
                                  protocol="tcp://", dashboard_address=None) as cluster:
        address = cluster.scheduler_address
        assert main(["simulate", "sweep", "--grid", str(path), "--out", str(tmp_path / "o"), "--scheduler", address,
                     "--json"]) == 0
    err = " ".join(capsys.readouterr().err.split())
    assert f"warning: --scheduler {address}: Dask's tcp:// has no authentication" in err
    assert main(["simulate", "sweep", "--grid", str(path), "--out", str(tmp_path / "p"), "--scheduler", address,
                 "--tls-ca", str(path)]) == 2
    assert "--tls-ca is only for --scheduler tls://" in capsys.readouterr().err
