"""Paper-scale workloads of the network simulator: communication formulas, FSDP stages, fabrics with
shared NICs and oversubscription, one-GPU-per-host placement, trace readers, the contended preset."""

import json
import math

import pytest

from leveller.errors import UserError
from leveller.model.job import JobSpec
from leveller.sim.network.engine import Simulation
from leveller.sim.network.jobs import iteration_volume, phase_volume
from leveller.sim.network.policies import make_net_policy
from leveller.sim.network.runjob import RunJob, ring_flows
from leveller.sim.network.topology import load_network
from leveller.sim.network.trace import synthetic
from leveller.sim.network.tracefiles import read_trace


def test_ddp_and_fsdp_bytes_against_hand_computed_values() -> None:
    # 1.3B parameters, 4 ranks. DDP fp32: 2 x 3/4 x 5.2 GB = 7.8 GB per rank per iteration.
    assert iteration_volume("ddp", 4, 1.3e9 * 4) == pytest.approx(7.8e9)
    assert phase_volume("ddp", 4, 1.3e9 * 4) == pytest.approx(7.8e9)
    # FSDP bf16: 3 phases of 3/4 x 2.6 GB = 1.95 GB, 5.85 GB per iteration.
    assert phase_volume("fsdp", 4, 1.3e9 * 2) == pytest.approx(1.95e9)
    assert iteration_volume("fsdp", 4, 1.3e9 * 2) == pytest.approx(5.85e9)
    assert phase_volume("fsdp", 1, 1e9) == 0.0 and iteration_volume("ddp", 1, 1e9) == 0.0
    with pytest.raises(ValueError, match="collective = 'zero'"):
        phase_volume("zero", 2, 1.0)


def test_fsdp_iteration_is_three_overlapped_phases() -> None:
    net = load_network("dumbbell")  # 1 Gbit/s host links, 50 Mbit/s bottleneck
    hosts = ("h1", "h2")  # same side: 1 Gbit/s = 125 MB/s
    spec = JobSpec("f", hosts, compute=3.0, bytes=250e6, iterations=4, size=2, collective="fsdp")
    job = RunJob(spec, hosts, 0.0, net)
    assert [f.volume for f in job.flows] == [pytest.approx(125e6)] * 2  # (2-1)/2 x 250 MB per phase
    a = job.profile.duration
    assert a == pytest.approx(1.0)
    assert job.ideal == pytest.approx(3 * max(1.0, a))  # each phase hides under its third of compute
    slow = RunJob(JobSpec("g", hosts, compute=1.5, bytes=250e6, size=2, collective="fsdp"), hosts, 0.0, net)
    assert slow.ideal == pytest.approx(3 * 1.0)  # comm (1 s) longer than each compute third (0.5 s)
    ddp = RunJob(JobSpec("d", hosts, compute=1.5, bytes=250e6, slack=0.5, size=2), hosts, 0.0, net)
    assert ddp.ideal == pytest.approx(1.5 + 2.0 - 0.5)  # all-reduce 2 x 125 MB = 2 s, 0.5 s hidden
    r = Simulation(net, [spec], make_net_policy("fair", 0.0), 2).run()
    assert r.jobs[0].finish == pytest.approx(4 * 3.0) and r.jobs[0].rate == pytest.approx(1.0)


def test_two_fsdp_jobs_sharing_a_link_slow_down_and_are_congested() -> None:
    net = load_network("dumbbell")
    a = JobSpec("a", ("h1", "h3"), compute=1.5, bytes=50e6, iterations=10, size=2, collective="fsdp")
    b = JobSpec("b", ("h2", "h4"), compute=1.5, bytes=50e6, iterations=10, size=2, collective="fsdp")
    r = Simulation(net, [a, b], make_net_policy("fair", 0.0), 2, congestion=True).run()
    alone = Simulation(net, [a], make_net_policy("fair", 0.0), 2).run()
    assert alone.jobs[0].rate == pytest.approx(1.0)
    assert max(j.rate for j in r.jobs) < 0.9
    assert r.congested_share == 1.0 and r.summary()["congested_share"] == 1.0


def test_fabric_with_one_nic_per_host_and_oversubscription() -> None:
    net = load_network("fabric:gpus=128,nics_per_host=1,gbps=100,oversub=2")
    assert len(net.nics) == 16 and net.total_gpus == 128 and net.nics["h3"] == ("h3r0",)
    assert net.capacity[net.index["h3r0>l0r0"]] == pytest.approx(100e9 / 8)
    # a leaf's uplinks = its downlinks / 2: 8 hosts x 100 Gbit/s / 2 over 8 spines = 50 Gbit/s each
    assert net.capacity[net.index["l0r0>s5"]] == pytest.approx(50e9 / 8)
    assert net.capacity[net.index["s5>l1r0"]] == pytest.approx(50e9 / 8)
    rails = load_network("fabric:gpus=64,gpus_per_host=8,nics_per_host=2,hosts_per_leaf=4,spines=2,gbps=200,oversub=4")
    assert rails.nics["h0"] == ("h0r0", "h0r1")
    assert rails.capacity[rails.index["l0r1>s1"]] == pytest.approx(4 * 200e9 / 4 / 2 / 8)
    default = load_network("fabric:gpus=64")  # today's fabric: every link the NIC rate
    assert set(default.capacity) == {400e9 / 8}


@pytest.mark.parametrize("spec,message", [
    ("fabric:gpus=64,nics_per_host=3", "must divide gpus_per_host"),
    ("fabric:gpus=64,oversub=0", "must be > 0"),
    ("paper-testbed:gbps=10", "takes no options"),
])
def test_fabric_option_errors(spec: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        load_network(spec)


def test_paper_testbed_preset() -> None:
    net = load_network("paper-testbed")
    assert len(net.nics) == 12 and net.total_gpus == 12 and net.gpus_per_host == 1
    leaves = {n.split(">")[1] for n in net.links if n.startswith("h") and ">l" in n}
    assert leaves == {"l0r0", "l1r0", "l2r0"}
    assert net.capacity[net.index["l2r0>s1"]] == pytest.approx(50e9 / 8)
    assert len(net.candidates("h0r0", "h11r0")) == 2  # through either spine


def test_one_gpu_per_host_ranks_share_the_hosts_nic() -> None:
    net = load_network("fabric:gpus=32,gpus_per_host=4,nics_per_host=2,hosts_per_leaf=2,spines=2,gbps=100")
    spec = JobSpec("j", ("h0", "h1"), 1.0, 1e9, size=2, gpus_per_rank=1)
    flows = ring_flows(spec, spec.hosts, net, slots=(3, 0))
    # GPU 3 of 4 uses NIC 3 x 2 // 4 = 1, GPU 0 uses NIC 0; one flow per rank, not striped
    assert [(f.src, f.dst) for f in flows] == [("h0r1", "h1r0"), ("h1r0", "h0r1")]
    assert all(f.volume == pytest.approx(1e9) for f in flows)


def test_contended_trace_places_one_gpu_per_host() -> None:
    net = load_network("fabric:gpus=64,nics_per_host=1,gbps=100,oversub=2,hosts_per_leaf=4,spines=2")
    jobs, placer = synthetic("contended:jobs=12,seed=3,max_hosts=8,min_s=30,max_s=60", net)
    assert {j.gpus_per_rank for j in jobs} == {1} and {j.collective for j in jobs} <= {"ddp", "fsdp"}
    assert all(j.model.startswith("gpt-") for j in jobs)
    sim = Simulation(net, jobs, make_net_policy("fair", 0.0), 2, 120, placer=placer, congestion=True)
    result = sim.run()
    for held in sim.taken.values():
        assert all(len(slots) == 1 for slots in held.values())
    gpus = {j.name: j.gpus for j in result.jobs if j.start is not None}
    assert gpus and all(gpus[s.name] == s.size for s in jobs if s.name in gpus)
    # no GPU slot is given twice
    used = [(h, s) for held in sim.taken.values() for h, sl in held.items() for s in sl]
    assert len(used) == len(set(used))


@pytest.mark.parametrize("spec,message", [
    ("contended:models=gpt5", "models = 'gpt5'"),
    ("synthetic:collective=fsdp", "needs models=paper"),
    ("synthetic:arrivals=lingjun", "needs file=PATH"),
    ("synthetic:file=x.csv", "takes no file="),
    ("replay:jobs=2", "unknown trace kind 'replay'"),
])
def test_trace_option_errors(spec: str, message: str) -> None:
    with pytest.raises(UserError, match=message):
        synthetic(spec, load_network("fabric:gpus=256"))


def write(path, text: str) -> str:
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_lingjun_reader(tmp_path) -> None:
    write(tmp_path / "job.csv", "id,job_name,kind,model,status,gmt_job_submitted,gmt_job_running,gmt_job_finished,"
          "gmt_job_stopped\n"
          "1,jb,PyTorchJob,gpt,Succeeded,2023/8/1 10:05,2023/8/1 10:06,2023/8/1 11:06,\n"
          "2,ja,PyTorchJob,bert,Succeeded,2023/8/1 10:00,2023/8/1 10:01,,2023/8/1 10:31\n"
          "3,jc,TFJob,x,Failed,2023/8/1 10:07,,,\n"
          "4,jd,PyTorchJob,cpu,Succeeded,2023/8/1 10:08,2023/8/1 10:09,2023/8/1 10:19,\n")
    res8 = json.dumps({"nvidia.com/gpu": "8", "cpu": "64"}).replace('"', '""')
    res2 = json.dumps({"nvidia.com/gpu": 2}).replace('"', '""')
    write(tmp_path / "worker.csv", "job_name,worker_name,replica_type,host_ip,RES\n"
          f'jb,jb-w0,worker,ip1,"{res8}"\njb,jb-w1,worker,ip2,"{res8}"\nja,ja-m,master,ip3,"{res2}"\n'
          'jd,jd-w0,worker,ip4,"{""cpu"": 4}"\n')
    jobs = read_trace("lingjun", str(tmp_path))
    assert [(j.name, j.gpus, j.duration) for j in jobs] == [("ja", 2, 1800.0), ("jb", 16, 3600.0)]
    assert jobs[1].submit - jobs[0].submit == 300.0
    net = load_network("fabric:gpus=256")
    specs, _ = synthetic(f"synthetic:arrivals=lingjun,file={tmp_path}", net)
    assert [(s.arrival, s.size) for s in specs] == [(0.0, 1), (300.0, 2)]  # 8 GPUs per host
    assert specs[0].iterations == math.ceil(1800 / specs[0].compute)


def test_lingjun_reader_names_the_missing_column(tmp_path) -> None:
    write(tmp_path / "job.csv", "job_name,submitted\nx,1\n")
    write(tmp_path / "worker.csv", "job_name,RES\n")
    with pytest.raises(UserError, match="no column 'gmt_job_submitted'"):
        read_trace("lingjun", str(tmp_path))


def test_philly_reader(tmp_path) -> None:
    log = [
        {"jobid": "application_1", "status": "Pass", "submitted_time": "2017-10-03 02:45:01",
         "attempts": [{"start_time": "2017-10-03 02:46:01", "end_time": "2017-10-03 02:50:01",
                       "detail": [{"ip": "m1", "gpus": ["gpu0"]}]},
                      {"start_time": "2017-10-03 03:00:00", "end_time": "2017-10-03 03:46:01",
                       "detail": [{"ip": "m1", "gpus": ["gpu0", "gpu1"]}, {"ip": "m2", "gpus": ["gpu3", "gpu4"]}]}]},
        {"jobid": "application_2", "status": "Killed", "submitted_time": "2017-10-03 02:40:00", "attempts": []},
        {"jobid": "application_3", "status": "Pass", "submitted_time": "2017-10-03 02:50:00",
         "attempts": [{"start_time": None, "end_time": None, "detail": []}]},
    ]
    jobs = read_trace("philly", write(tmp_path / "cluster_job_log", json.dumps(log)))
    assert [(j.name, j.gpus, j.duration) for j in jobs] == [("application_1", 4, 3600.0)]


def test_helios_reader(tmp_path) -> None:
    path = write(tmp_path / "cluster_log.csv",
                 "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue\n"
                 "j2,u,vc1,n,16,8,2,COMPLETED,2020-04-01 00:10:00,2020-04-01 00:11:00,2020-04-01 01:11:00,3600,60\n"
                 "j1,u,vc1,n,1,8,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:30,2020-04-01 00:10:30,600,30\n"
                 "j3,u,vc1,n,0,8,1,COMPLETED,2020-04-01 00:00:00,2020-04-01 00:00:30,2020-04-01 00:10:30,600,30\n")
    jobs = read_trace("helios", path)
    assert [(j.name, j.gpus, j.duration) for j in jobs] == [("j1", 1, 600.0), ("j2", 16, 3600.0)]
    with pytest.raises(UserError, match="no such file"):
        read_trace("helios", str(tmp_path / "absent.csv"))
    with pytest.raises(UserError, match="allowed: lingjun, philly, helios"):
        read_trace("borg", path)


def test_the_slack_left_follows_the_all_reduce_time_on_new_capacities() -> None:
    net = load_network("dumbbell")
    hosts = ("h1", "h2")  # same side: 1 Gbit/s = 125 MB/s, the all-reduce of 2 x 125 MB takes 2 s
    job = RunJob(JobSpec("d", hosts, compute=4.0, bytes=250e6, slack=3.0, size=2), hosts, 0.0, net)
    assert job.profile.duration == pytest.approx(2.0)
    assert job.wait == pytest.approx(1.0) and job.may_wait  # 3 s of slack, 2 of them sending
    capacity = net.capacity.copy()
    try:
        net.capacity[:] = capacity * 2
        job.refresh_profile(net)
        assert job.wait == pytest.approx(2.0)
        net.capacity[:] = capacity / 2
        job.refresh_profile(net)
        assert job.wait == 0.0 and not job.may_wait  # 4 s sending: nothing left to wait
    finally:
        net.capacity[:] = capacity
